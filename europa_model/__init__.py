"""The model side of the pipeline, as torchtitan components: the EUROPA MoE flavors (flavors.py, a ModelSpec),
parallelization (parallelize.py), DistMuon placements (optimizers.py), metrics, FLOPs per token, the shard
format and the dataloader over it (data/), DCP checkpoint folders (checkpoints.py), and the CPU adaptations
torchtitan 0.3.0 needs (cpu_compat.py, train_compat.py).

It imports nothing from stages/ (tests/test_architecture.py): the pretrain stage configures these parts,
evaluation reads checkpoints with them, and the shards stage writes the format data/format.py reads. Modules
that import torch or torchtitan do so themselves; checkpoints.py and data/format.py stay light.
"""
