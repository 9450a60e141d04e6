"""The Dask task runner (prefect-dask) gives the same outputs as the local engine: ingest -> tokenizer -> shards
on a few UDHR languages plus a source with duplicates across units (every dedup step has several units),
compared by each manifest's output digest. Once on the local Dask cluster the flow
starts itself (2 worker processes), once on workers started by `python -m flows.dask_slurm` (dask-jobqueue)
through a stand-in `sbatch` that runs the job script on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from pipeline import progress
from pipeline.cli import main
from pipeline.config import REPO_ROOT, ConfigError, load_config
from tests.conftest import duplicates_source, udhr_source, write_config

LANGS = '["de", "mt", "el", "hr"]'
SMALL = "[tokenizer]\nvocab_size = 1200\nreserved_tokens = 0\n[shards]\nval_fraction = 0.1\n"
STAGES = ("ingest", "tokenizer", "shards")


def _digests(run: Path) -> dict[str, str]:
    return {s: json.loads((run / s / "manifest.json").read_text())["output_digest"] for s in STAGES}


def _body(folder: Path, udhr_dir: Path) -> str:
    return udhr_source(udhr_dir) + SMALL + duplicates_source(folder / "dups", udhr_dir)


def _config(folder: Path, udhr_dir: Path, orchestration: str) -> Path:
    folder.mkdir()
    cfg = write_config(folder, _body(folder, udhr_dir), engine="prefect", languages=LANGS)
    cfg.write_text(cfg.read_text().replace('engine = "prefect"', 'engine = "prefect"\n' + orchestration))
    return cfg


@pytest.fixture
def notes(monkeypatch) -> list[str]:
    """The progress lines of this process (not capfd: Prefect's console handler keeps the first stream it sees)."""
    lines: list[str] = []
    monkeypatch.setattr(progress, "_emit", lines.append)
    return lines


@pytest.fixture(scope="module")
def local_digests(tmp_path_factory, udhr_dir) -> dict[str, str]:
    """The reference: the same stages with the local engine (no Prefect, no Dask)."""
    tmp = tmp_path_factory.mktemp("local")
    cfg = write_config(tmp, _body(tmp, udhr_dir), engine="local", languages=LANGS)
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp / "run"), "--to", "shards"]) == 0
    return _digests(tmp / "run")


@pytest.mark.slow
def test_local_dask_cluster_gives_the_local_engines_outputs(prefect_harness, local_digests, tmp_path, udhr_dir, notes):
    import psutil

    def workers() -> set[int]:  # the nannies and their workers are multiprocessing's spawned children
        pids = set()
        for p in psutil.Process().children(recursive=True):
            try:
                if "spawn_main" in " ".join(p.cmdline()):
                    pids.add(p.pid)
            except psutil.Error:  # ended meanwhile
                pass
        return pids

    cfg = _config(tmp_path / "dask", udhr_dir, 'task_runner = "dask"')
    before = workers()
    assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "shards"]) == 0
    assert workers() <= before  # the cluster, closed on a thread of its own after the data stages, was waited for
    assert any("units run on a local Dask cluster: 2 worker processes" in line for line in notes)
    assert _digests(tmp_path / "run") == local_digests  # the runner changes how, never what
    ingest = json.loads((tmp_path / "run" / "ingest" / "manifest.json").read_text())
    assert set(ingest["statistics"]["per_language"]) == {"de", "mt", "el", "hr"}
    for lang in ("de", "mt"):  # copies in other units (and in the other source) were found
        removed = ingest["statistics"]["per_language"][lang]["removed"]
        assert removed.get("exact_duplicate", 0) >= 2 and removed.get("near_duplicate") == 1, removed


FAKE_SBATCH = """\
#!/bin/sh
# Stand-in for sbatch: run the job script (copied: the caller deletes it) in its own process group.
cp "$1" "$FAKE_SLURM/job-$$.sh"
setsid bash "$FAKE_SLURM/job-$$.sh" > "$FAKE_SLURM/job-$$.out" 2>&1 < /dev/null &
echo $! > "$FAKE_SLURM/job-$$.pid"
echo "Submitted batch job $$"
"""
FAKE_SCANCEL = """\
#!/bin/sh
kill -TERM -- -"$(cat "$FAKE_SLURM/job-$1.pid")"
"""


@pytest.mark.slow
def test_dask_slurm_recipe_gives_the_local_engines_outputs(prefect_harness, local_digests, tmp_path, udhr_dir, notes):
    pytest.importorskip("dask_jobqueue")
    bin_dir, slurm = tmp_path / "bin", tmp_path / "slurm"
    bin_dir.mkdir()
    slurm.mkdir()
    for name, body in {"sbatch": FAKE_SBATCH, "scancel": FAKE_SCANCEL}.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SLURM": str(slurm)}
    address_file = tmp_path / "scheduler-address"
    recipe = subprocess.Popen(
        [sys.executable, "-m", "flows.dask_slurm", "--account", "proj", "--queue", "cpu", "--jobs", "1", "--cores", "2",
         "--memory", "4GB", "--port", "0", "--dashboard", "", "--interface", "lo", "--log-dir", str(slurm),
         "--address-file", str(address_file)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not address_file.exists():
            assert recipe.poll() is None, recipe.stdout.read()
            assert time.monotonic() < deadline, "no scheduler address after 60 s"
            time.sleep(0.2)
        address = address_file.read_text().strip()
        assert address.startswith("tcp://127.0.0.1:")
        cfg = _config(tmp_path / "dask", udhr_dir, f'task_runner = "dask"\ndask_address = "{address}"')
        assert main(["run", "--config", str(cfg), "--run-dir", str(tmp_path / "run"), "--to", "shards"]) == 0
        assert any(f"units run on the Dask scheduler at {address}" in line for line in notes)
        assert _digests(tmp_path / "run") == local_digests
        job_script = next(slurm.glob("job-*.sh")).read_text()
        assert "#SBATCH -A proj" in job_script and "--nthreads 1" in job_script and "--nworkers 2" in job_script
    finally:
        recipe.terminate()  # the recipe cancels its jobs (scancel) on SIGTERM
        out, _ = recipe.communicate(timeout=60)
    assert "Dask scheduler at tcp://127.0.0.1:" in out and 'task_runner = "dask"' in out, out


def test_dask_address_needs_the_dask_runner(tmp_path):
    cfg = write_config(tmp_path, "", engine="prefect")
    text = cfg.read_text().replace("max_workers = 2", 'max_workers = 2\ndask_address = "tcp://10.1.2.3:8786"')
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=r'\[orchestration.dask_address\]: only used with task_runner = "dask"'):
        load_config(cfg)
    cfg.write_text(text.replace('engine = "prefect"', 'engine = "prefect"\ntask_runner = "dask"'))
    config = load_config(cfg)
    assert config.to_dict()["orchestration"]["dask_address"] == "tcp://10.1.2.3:8786"
    from flows.dask_cluster import dask_scheduler
    from flows.stages import task_runner

    with dask_scheduler(config) as address:  # a given scheduler is used as is: nothing started here
        runner = task_runner(config, address)
    assert type(runner).__name__ == "DaskTaskRunner" and runner.address == "tcp://10.1.2.3:8786"


def test_dask_slurm_dry_run_prints_the_job_script(capsys):
    pytest.importorskip("dask_jobqueue")
    from flows.dask_slurm import main as recipe

    assert recipe(["--account", "proj", "--queue", "cpu", "--cores", "48", "--memory", "180GB", "--port", "0",
                   "--prefect-api", "http://login01:4200/api", "--sbatch=--constraint=cpu", "--dry-run"]) == 0
    script = capsys.readouterr().out
    for needle in ("#SBATCH -A proj", "#SBATCH -p cpu", "#SBATCH --cpus-per-task=48", "#SBATCH --constraint=cpu",
                   "export PREFECT_API_URL=http://login01:4200/api", "export OMP_NUM_THREADS=1",
                   "export MALLOC_TRIM_THRESHOLD_=67108864", "export DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False",
                   "export DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL=5s",
                   "export DASK_DISTRIBUTED__WORKER__PRELOAD=flows.task_context",
                   f"{sys.executable} -m distributed.cli.dask_worker", "--nthreads 1", "--nworkers 48"):
        assert needle in script, needle


def _worker_settings() -> dict:
    import dask

    import pyarrow as pa

    from flows import DASK_WORKER_ENV

    return {k: os.environ.get(k) for k in DASK_WORKER_ENV} | {
        "profile": dask.config.get("distributed.worker.profile.enabled"), "arrow": pa.default_memory_pool().backend_name,
        "tick": dask.config.get("distributed.admin.tick.interval"),
        "monitor": dask.config.get("distributed.admin.system-monitor.interval")}


def test_local_dask_workers_start_with_the_worker_environment(tmp_path, udhr_dir):
    """What a worker reads once, as it starts (glibc's malloc thresholds, Dask's profiler switch, Arrow's
    allocator), must reach it before it starts; without them a worker costs 4-25% more CPU and ~60 MB more at
    its peak (flows/__init__.py)."""
    from distributed import Client

    from flows import DASK_WORKER_ENV
    from flows.dask_cluster import dask_scheduler

    cfg = load_config(_config(tmp_path / "d", udhr_dir, 'task_runner = "dask"'))
    with dask_scheduler(cfg) as address, Client(address) as client:
        seen = list(client.run(_worker_settings).values())
    assert len(seen) == cfg.orchestration.max_workers
    assert all(s == {**DASK_WORKER_ENV, "profile": False, "arrow": "jemalloc", "tick": "500ms", "monitor": "5s"}
               for s in seen), seen
