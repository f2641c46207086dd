"""What tests and benches share that is not a test: servers on 127.0.0.1 (remote_servers.py)."""
