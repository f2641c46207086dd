"""Remote stores (marker `network`): S3 and HTTP servers on 127.0.0.1, the node cache, healing, URLs."""
