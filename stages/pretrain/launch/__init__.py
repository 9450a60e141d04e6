"""Launching the training job on a Slurm cluster (JUPITER's Booster): checks.py (is the layout valid and does
it fit), sbatch.py (the job script), slurm.py (sbatch / squeue / sacct), submit.py (render + submit + record)."""
