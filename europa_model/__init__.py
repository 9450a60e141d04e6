"""The EUROPA MoE for torchtitan: the dataloader over our shards (the model itself is not built yet).

Heavy: imports torch and torchtitan. Nothing in pipeline/ or the data stages imports this package.
"""
