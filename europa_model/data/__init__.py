"""Training data as torchtitan reads it: the shard format (format.py), per-language document streams and the
mixture (streams.py), packing into rows (packing.py) and the dataloader (loader.py)."""
