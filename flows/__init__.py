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


# What Dask worker processes start with, read once as each starts: the environment from the nanny's pre-spawn
# environment (local cluster) or `export` in the Slurm job script (flows/dask_slurm.py), the Dask settings from the
# config the nanny hands its worker. Why each (the measurements: docs/benchmarks.md):
# - malloc: the nanny's MALLOC_TRIM_THRESHOLD_ also pins glibc's mmap threshold at 128 KiB, making every larger array
#   a fresh mmap with its page faults; our units are bounded by their batches, so larger thresholds cost little.
# - the profiler off and the event-loop diagnostics slower: they feed a dashboard nobody reads here (the nanny's
#   memory check, which guards the node against a runaway worker, keeps its pace).
# - Arrow's allocator: jemalloc, as `europa` sets for itself (pipeline/cli.py), for workers started without it.
# - one Prefect API client for the worker's life (flows/task_context.py: dask_setup, Dask's preload hook).
DASK_WORKER_ENV = {"MALLOC_TRIM_THRESHOLD_": str(64 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20),
                   "ARROW_DEFAULT_MEMORY_POOL": "jemalloc"}
DASK_WORKER_CONFIG = {"distributed.worker.profile.enabled": False, "distributed.admin.tick.interval": "500ms",
                      "distributed.admin.system-monitor.interval": "5s", "distributed.worker.preload": "flows.task_context"}
