"""Launching the training job on a Slurm cluster (JUPITER's Booster by default): checks.py (is the layout valid
and does it fit), sbatch.py (the training job's script), submit.py (render + submit + record). The Slurm client,
the script's machine part and following a job are the cluster package's (stages/cluster/)."""
