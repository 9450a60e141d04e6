"""The planner: will a `[pretrain]` layout fit, how fast, how long, how much compute, before a job is queued.

shape.py (the model's dimensions and counts) -> memory.py (per-GPU memory by phase); workload.py (what one GPU
does per micro-step) -> routing.py (where expert copies travel) -> throughput.py (predicted step time, tokens/s,
bottleneck), checked against published.py (measured runs); projection.py (MFU, days, FLOPs from a rate) ->
report.py (`plan()`) and text.py (what `europa plan` prints; the launcher checks the same plan).
"""
