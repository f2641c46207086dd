"""The file format and damaged files: the independent reader of docs/format.md, integrity checks,
corrupted, crafted and oversized files, ids read by position."""
