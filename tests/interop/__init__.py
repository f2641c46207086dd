"""Other libraries' dataset APIs: Hugging Face datasets in and out, the docstore.ir_datasets drop-in."""
