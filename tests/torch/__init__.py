"""docstore.torch: datasets, DataLoader workers, resuming; DDP, Sentence Transformers and the
memory studies are marker `training`."""
