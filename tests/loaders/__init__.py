"""docstore.torch: datasets, DataLoader workers, resuming; DDP, Sentence Transformers and the
memory studies are marker `training`. Not named torch/: with tests/ on sys.path (`python -m pytest`
run from inside tests/ puts it there) it would shadow the real torch, as collections/ would the
standard library's (hence collection/)."""
