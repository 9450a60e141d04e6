"""Dask workers on Slurm CPU nodes for the data stages (dask-jobqueue), and the address to give `europa`.

    python -m flows.dask_slurm --account PROJ --queue PARTITION --jobs 4 --cores 48 --memory 180GB \
        --walltime 04:00:00 [--interface ib0] [--prefect-api http://LOGIN:4200/api] [--dry-run]

Starts a Dask scheduler in this process (run it on the login node, in tmux/screen, or in a small CPU job),
submits `--jobs` Slurm jobs of one node each, every job running `--cores` worker processes with one thread
(units are CPU-bound Python: processes, not threads), and prints the `[orchestration]` lines that point
`europa run` at it. It keeps the cluster up until Ctrl-C / SIGTERM, then cancels the jobs. `--dry-run` prints
the job script and exits without submitting anything. Needs `pip install -e ".[slurm]"`; docs/scaling.md.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from flows import DASK_WORKER_CONFIG, DASK_WORKER_ENV


def build_cluster(args: argparse.Namespace):
    from dask_jobqueue import SLURMCluster

    # the nanny takes these from the environment over its defaults (see DASK_WORKER_ENV)
    dask_env = {"DASK_" + k.upper().replace(".", "__").replace("-", "_"): v  # Dask's own spelling ("_" for "-")
                for k, v in DASK_WORKER_CONFIG.items()}
    prologue = ["export OMP_NUM_THREADS=1", *(f"export {k}={v}" for k, v in {**DASK_WORKER_ENV, **dask_env}.items()),
                f"cd {Path.cwd()}"]
    if args.prefect_api:
        prologue.append(f"export PREFECT_API_URL={args.prefect_api}")
    return SLURMCluster(
        job_name="europa-dask",
        account=args.account,
        queue=args.queue,
        walltime=args.walltime,
        cores=args.cores,
        processes=args.cores,  # one single-threaded worker process per core
        memory=args.memory,
        interface=args.interface,
        python=sys.executable,  # the same virtual environment on every node (shared filesystem)
        job_script_prologue=prologue,
        job_extra_directives=args.sbatch or [],
        log_directory=str(args.log_dir),
        scheduler_options={"port": args.port, "dashboard_address": args.dashboard},
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.dask_slurm", description=__doc__.split("\n\n")[0])
    ap.add_argument("--account", required=True, help="Slurm account / project budget (#SBATCH -A).")
    ap.add_argument("--queue", required=True, help="Slurm partition of CPU nodes (#SBATCH -p).")
    ap.add_argument("--jobs", type=int, default=1, help="Slurm jobs (one node each) to start.")
    ap.add_argument("--cores", type=int, required=True, help="Cores per node: that many single-threaded workers per job.")
    ap.add_argument("--memory", required=True, help="Memory per node for the workers, e.g. 180GB (split evenly between them).")
    ap.add_argument("--walltime", default="04:00:00")
    ap.add_argument("--interface", default=None, help="Network interface the nodes talk over, e.g. ib0 (default: Dask's choice).")
    ap.add_argument("--port", type=int, default=8786, help="Scheduler port; a fixed one keeps dask_address stable.")
    ap.add_argument("--dashboard", default=":8787", help="Dask dashboard address (needs bokeh), or '' for none.")
    ap.add_argument("--prefect-api", default=None, help="PREFECT_API_URL the workers report task runs to (a server they can reach).")
    ap.add_argument("--sbatch", action="append", help="An extra #SBATCH directive, e.g. --sbatch=--constraint=cpu (repeatable).")
    ap.add_argument("--log-dir", type=Path, default=Path("logs/dask"))
    ap.add_argument("--address-file", type=Path, default=None, help="Also write the scheduler address here.")
    ap.add_argument("--dry-run", action="store_true", help="Print the job script; submit nothing.")
    args = ap.parse_args(argv)
    args.dashboard = args.dashboard or None

    with build_cluster(args) as cluster:
        if args.dry_run:
            print(cluster.job_script())
            return 0
        cluster.scale(jobs=args.jobs)
        address = cluster.scheduler_address
        if args.address_file:
            args.address_file.write_text(address + "\n", encoding="utf-8")
        print(f"Dask scheduler at {address}: {args.jobs} Slurm job(s) x {args.cores} workers requested. In the config:\n\n"
              f'[orchestration]\nengine = "prefect"\ntask_runner = "dask"\ndask_address = "{address}"\n\n'
              f"Ctrl-C (or SIGTERM) stops the workers and cancels their jobs.", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
