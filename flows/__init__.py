"""Prefect flows: a thin layer that fans stage units out as tasks and chains stages. No stage logic here.

Importing this package sets Prefect's offline defaults before Prefect itself is imported: no analytics, no
phoning home, and a start-up timeout for the temporary local server that survives a loaded 2-core machine.
Users can still override each of them in their environment. It also holds the environment Dask worker
processes start with (DASK_WORKER_ENV, DASK_WORKER_CONFIG), for the local cluster (flows/stages.py) and the Slurm recipe
(flows/dask_slurm.py).
"""

import os

for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}.items():
    os.environ.setdefault(_key, _value)


# What Dask worker processes start with. Each is read once, as the process starts: the environment from the
# nanny's pre-spawn environment (local cluster, flows/stages.py) or `export` in the Slurm job script
# (flows/dask_slurm.py); the Dask settings from the config the nanny hands its worker (set around the local
# cluster; DASK_* variables in the job script).
# - malloc: Dask's nanny starts its workers with MALLOC_TRIM_THRESHOLD_=64 KiB (to give freed memory back at once),
#   which also fixes glibc's mmap threshold at 128 KiB: every larger array (numpy, Arrow) is then a fresh mmap and
#   its page faults, ~10% more CPU for the ingest's units than in a process pool. Ours are bounded by their
#   batches, so larger thresholds cost little memory: freed memory goes back above 64 MiB, arrays under 16 MiB
#   reuse the heap.
# - profiler off: each worker samples its task thread's stack every 10 ms for the dashboard's profile page, which
#   nobody reads here (the local cluster has no dashboard); measured on a 300 MB ingest, 4-7% of the workers' CPU.
# - event-loop diagnostics at a slower pace: every Dask server (scheduler, nanny, worker) checks every 20 ms how late
#   its event loop is and samples psutil every 500 ms for the dashboard; an idle 2-worker local cluster burned
#   36 ms of CPU per second that way, 15 with a 500 ms tick and a 5 s monitor. (The nanny's memory check, which
#   guards the node against a runaway worker, keeps its 100 ms.)
# - Arrow's allocator: jemalloc, as `europa` sets for itself (pipeline/cli.py), for workers started without it.
# - one Prefect API client for the worker's life (flows/task_context.py: dask_setup, Dask's preload hook).
DASK_WORKER_ENV = {"MALLOC_TRIM_THRESHOLD_": str(64 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20),
                   "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
DASK_WORKER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "500ms",
                      "distributed.admin.system-monitor.interval": "5s", "distributed.worker.preload": "flows.task_context"}
