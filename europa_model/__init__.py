"""The torchtitan side of the pipeline: the EUROPA MoE flavors (flavors.py), the CPU adaptations torchtitan
0.3.0 needs to import here (cpu_compat.py) and the dataloader over our shards (dataloader.py).

Heavy: imports torch and torchtitan. Nothing in pipeline/ or the data stages imports this package. Training
(the pretrain stage) is not built yet.
"""
