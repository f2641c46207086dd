"""docstore.ray and docstore.spark (marker `engines`): a local Ray cluster, a Spark session."""
