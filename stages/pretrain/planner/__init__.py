"""The planner: will a `[pretrain]` layout fit, how fast, how long, how much compute, before a job is queued.

shape.py (the model's dimensions and counts) -> memory.py (per-GPU memory by phase) and throughput.py
(FLOPs, utilisation, days) -> report.py (`plan()`: the report `europa plan` prints and the launcher checks).
"""
