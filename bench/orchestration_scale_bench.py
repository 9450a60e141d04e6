#!/usr/bin/env python3
"""What orchestrating N units costs: N no-op (or sleeping) units through the real executor, the Prefect mapper
and a real Prefect server, on threads, processes or a local Dask cluster.

    .venv/bin/python bench/orchestration_scale_bench.py [--sizes 1000,10000,100000] [--runners threads,processes,dask]
        [--servers temporary,external] [--sleep-ms 0] [--workers 2] [--reference COMMIT] [--json OUT]

Each run is a fresh process (the `europa` side: it plans, maps and publishes) with a fresh PREFECT_HOME, so the
server's database holds that run alone. `temporary` is the server a run starts for itself; `external` is a
`prefect server start` the bench starts first (SQLite), as a cluster's login node would run one. Per run: task
runs created (counted in the server's database), `europa` CPU per unit (its own CPU while the stage runs), the
server's CPU, the database's size, `europa`'s peak RSS and the wall time; the published stage is checked to hold
every unit's result.

`--reference COMMIT` runs every configuration a second time on that commit's code (a git worktree, alternating
old and new) and prints each figure next to it with the ratio: the orchestration before a change, measured in the
same run. The reference needs a stage contract in which a stage travels with its context (5d1c56d or later).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
SERVER_START_S = 180.0


# --- one measured run (in its own process) ---------------------------------------------------------------------
class ChildCPU:
    """CPU seconds of this process's descendants, sampled every `every` s (a child's last sample before it
    exits is what counts): the temporary server and the workers are children of the run."""

    def __init__(self, every: float = 0.2):
        import psutil

        self._me, self._every, self._seen = psutil.Process(), every, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psutil

        while not self._stop.is_set():
            for child in self._me.children(recursive=True):
                try:
                    t = child.cpu_times()
                    kind = self._seen.get(child.pid, ("",))[0]
                    if kind != "server":  # a process that is exiting shows an empty command line: keep its kind
                        kind = "server" if any("uvicorn" in a or a == "server" for a in child.cmdline()) else "workers"
                    self._seen[child.pid] = (kind, t.user + t.system)
                except psutil.Error:
                    pass
            self._stop.wait(self._every)

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join()
        out: dict[str, float] = {"server": 0.0, "workers": 0.0}
        for kind, cpu in self._seen.values():
            out[kind] += cpu
        return out


def one_run(spec: dict[str, Any]) -> dict[str, Any]:
    import noop_stage

    from flows.stages import run_stages
    from pipeline.config import OrchestrationConfig, PipelineConfig, RunConfig
    from pipeline.rundir import RunDir

    noop_stage.install()
    orchestration = OrchestrationConfig(engine="prefect", task_runner=spec["runner"], max_workers=spec["workers"])
    config = PipelineConfig(RunConfig(name="orchestration-bench", languages=["en"]), orchestration,
                            {noop_stage.NAME: noop_stage.NoopConfig(units=spec["units"], sleep_ms=spec["sleep_ms"])},
                            None)
    rd = RunDir(spec["run_dir"])
    children = ChildCPU()
    cpu0, t0 = _self_cpu(), time.monotonic()
    with rd.lock("orchestration bench"):
        run_stages(rd, config, [noop_stage.NAME], [])
    wall, cpu = time.monotonic() - t0, _self_cpu() - cpu0
    child_cpu = children.stop()
    n = spec["units"]
    published = (rd.stage_dir(noop_stage.NAME) / "units.txt").read_text().split()
    return {"units": n, "wall_s": round(wall, 2), "europa_cpu_s": round(cpu, 2),
            "europa_cpu_ms_per_unit": round(cpu / n * 1000, 3),
            "europa_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "server_cpu_s": round(child_cpu["server"], 2), "workers_cpu_s": round(child_cpu["workers"], 2),
            "outputs_complete": published == [str(n), str(n * (n - 1) // 2)]}


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# --- the bench: runs, servers, databases ------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExternalServer:
    """`prefect server start` with its own PREFECT_HOME (its SQLite database), as a login node would run one."""

    def __init__(self, home: Path, env: dict[str, str]):
        self.port = _free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.proc = subprocess.Popen([sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1",
                                      "--port", str(self.port)], env={**env, "PREFECT_HOME": str(home)},
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SERVER_START_S
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"prefect server start did not answer at {self.api_url}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def cpu_s(self) -> float:
        import psutil

        total = 0.0
        for p in [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def database_figures(home: Path) -> dict[str, Any]:
    db = home / "prefect.db"
    size = sum(p.stat().st_size for p in home.glob("prefect.db*")) if db.exists() else 0
    runs = None
    if db.exists():
        with sqlite3.connect(db) as con:
            runs = con.execute("select count(*) from task_run").fetchone()[0]
    return {"task_runs": runs, "database_mb": round(size / 1e6, 1)}


def measure(code: Path, spec: dict[str, Any], server: str) -> dict[str, Any]:
    """One run of `spec` on the code at `code` (a checkout), in a fresh process and PREFECT_HOME."""
    with tempfile.TemporaryDirectory(prefix="europa-orch-") as tmp:
        home, run_dir = Path(tmp) / "prefect-home", Path(tmp) / "run"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env.update({"PYTHONPATH": f"{code}{os.pathsep}{BENCH}", "PREFECT_HOME": str(home), "OMP_NUM_THREADS": "1",
                    "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1",
                    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180"})
        external = ExternalServer(home, env) if server == "external" else None
        if external is not None:
            env["PREFECT_API_URL"] = external.api_url
            cpu_before = external.cpu_s()
        try:
            proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--one",
                                   json.dumps({**spec, "run_dir": str(run_dir)})],
                                  cwd=code, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise RuntimeError(f"run failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-5:]}")
            result = json.loads(proc.stdout.strip().splitlines()[-1])
            if external is not None:
                result["server_cpu_s"] = round(external.cpu_s() - cpu_before, 2)
        finally:
            if external is not None:
                external.stop()
        return {**result, **database_figures(home), "server": server}


def reference_checkout(commit: str) -> Path:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", commit], capture_output=True, text=True,
                         check=True).stdout.strip()
    path = Path(tempfile.gettempdir()) / f"europa-orchestration-ref-{sha[:12]}"
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), sha], check=True,
                       capture_output=True)
    return path


FIGURES = ("task_runs", "europa_cpu_ms_per_unit", "europa_peak_rss_mb", "server_cpu_s", "database_mb", "wall_s")
# issue 42's bar at N = 10^5 no-op units; rss_growth is peak RSS at 10^5 over peak RSS at 10^4
GOALS = {"task_runs": 2000, "europa_cpu_ms_per_unit": 1.0, "europa_peak_rss_mb": 1000, "rss_growth": 1.3,
         "database_mb": 500}


def print_row(spec: dict[str, Any], new: dict[str, Any], old: dict[str, Any] | None) -> None:
    def cell(k: str) -> str:
        if old is None or not old.get(k):
            return f"{new[k]}"
        return f"{new[k]} ({old[k]}, {new[k] / old[k]:.2f}x)" if isinstance(new[k], (int, float)) else f"{new[k]}"

    head = f"{spec['runner']:9s} {new['server']:9s} N={spec['units']:>7,} sleep={spec['sleep_ms']:g}ms"
    print(head + "  " + "  ".join(f"{k}={cell(k)}" for k in FIGURES)
          + ("" if new["outputs_complete"] else "  OUTPUTS INCOMPLETE"), flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--runners", default="threads,processes,dask")
    ap.add_argument("--servers", default="temporary,external")
    ap.add_argument("--sleep-ms", default="0", help="comma-separated: each unit sleeps this long")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reference", metavar="COMMIT", help="also run each configuration on this commit's code")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--data", type=Path, help="unused: the units are made here (accepted for bench/summary.py)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one_run(json.loads(args.one))))
        return 0

    ref = reference_checkout(args.reference) if args.reference else None
    rows = []
    print(f"figures: new (reference {args.reference}, new / reference)" if ref else "figures", flush=True)
    for n in (int(s) for s in args.sizes.split(",")):
        for sleep_ms in (float(s) for s in args.sleep_ms.split(",")):
            for runner in args.runners.split(","):
                for server in args.servers.split(","):
                    spec = {"units": n, "sleep_ms": sleep_ms, "runner": runner, "workers": args.workers}
                    old = measure(ref, spec, server) if ref else None
                    new = measure(ROOT, spec, server)
                    print_row(spec, new, old)
                    rows.append({"spec": spec, "new": new, "reference": old})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
        args.json.write_text(json.dumps({"commit": head, "reference": args.reference, "goals": GOALS, "runs": rows},
                                        indent=1) + "\n")
    return 0 if all(r["new"]["outputs_complete"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
