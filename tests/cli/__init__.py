"""The command line, and the commands that replace or add to what is at a target."""
