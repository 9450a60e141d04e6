"""The calibration job (`europa launch calibrate`): launch.py renders and submits it, job.py is what every rank
runs. It measures what the planner otherwise assumes; stages/pretrain/planner/measured.py reads its file."""
