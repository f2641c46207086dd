"""Collections: shard files sealed into one directory that reads as one store."""
