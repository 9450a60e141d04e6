"""The run's machine and its Slurm, shared by the stages that run jobs on it: pretrain (the training job) and
evaluate (the distributed evaluation). Not a stage: nothing here knows what a job computes.

    config.py    the [pretrain.machine] and [pretrain.slurm] settings models (declared under [pretrain], which
                 checks its layout against the machine; other jobs of the run use them as declared there)
    machine.py   the machine profile (Hardware) and the JUPITER Booster preset
    sbatch.py    a job script: one torchrun per node, its rendezvous, binding and environment
    slurm.py     sbatch, squeue and sacct; the submissions a job folder records (jobs.jsonl)
    follow.py    following a submitted job until it ends
    errors.py    LaunchError, the one-line refusal
"""
