"""What the pretrain stage's Slurm path relies on, shown on a real Slurm 22.05 (tests/slurm/cluster.py): the
answers of sbatch, squeue, scontrol, scancel and sacct for a job that completes, fails, is cancelled, runs out
of time or asks for more than the node has; srun inside a batch script; GPUs as GRES; and the fixture itself
(private config, teardown by pid, a crashed session's leftovers). Each assertion is a fact the launcher's
code may depend on, so a Slurm upgrade that changes one fails here rather than on JUPITER.

Wall time: the time-limit jobs dominate (Slurm's smallest limit is 1 minute and slurmctld checks limits
every 30 s: TIMEOUT arrives 60-90 s after the start); they are submitted by the first test and checked by the
last, so the other tests run meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.slurm import plugin
from tests.slurm.cluster import CPU, PREFIX, SlurmCluster, _processes_of, missing, reap_stale

SLEEPER = "#!/bin/bash\nsleep 300\n"


@pytest.fixture(scope="module")
def timeout_jobs(_slurm_cpu, request):
    """One 1-minute job per cluster (with accounting where that cluster can start), submitted once, early."""
    jobs = {"plain": (_slurm_cpu, _slurm_cpu.sbatch(SLEEPER, "--time=1"))}
    if missing(CPU, accounting=True) is None:
        acct = request.getfixturevalue("_slurm_cpu_accounting")
        jobs["accounting"] = (acct, acct.sbatch(SLEEPER, "--time=1"))
    return jobs


def test_time_limit_jobs_start(timeout_jobs):
    """Submits the 1-minute jobs first (checked by the last test) and sees them run."""
    for cluster, job in timeout_jobs.values():
        assert cluster.wait_state(job, {"RUNNING"}, timeout=20) == "RUNNING"
        assert cluster.field(job, "TimeLimit") == "00:01:00"


def test_sbatch_parsable_job_completes_and_then_vanishes_from_plain_squeue(slurm_cluster, tmp_path):
    script = tmp_path / "job.sbatch"
    script.write_text(f"#!/bin/bash\n#SBATCH --output={tmp_path}/slurm-%j.out\necho job $SLURM_JOB_ID on "
                      "$SLURMD_NODENAME\nsleep 1\n")
    # sbatch as the pipeline calls it: the environment's SLURM_CONF (exported by the fixture) finds the cluster
    assert os.environ["SLURM_CONF"] == str(slurm_cluster.conf)
    r = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip()
    assert job.isdigit()
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        q = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, timeout=30)
        assert q.returncode == 0, q.stderr
        state = q.stdout.strip()
        if not seen or seen[-1] != state:
            seen.append(state)
        if state == "":
            break
        time.sleep(0.1)
    assert seen[-1] == "" and set(seen[:-1]) <= {"PENDING", "RUNNING", "COMPLETING"} and "RUNNING" in seen, seen
    # the ended job is still known to slurmctld (until MinJobAge, 300 s by default), just not to plain squeue
    assert slurm_cluster.state(job) == "COMPLETED"
    assert slurm_cluster.field(job, "JobState") == "COMPLETED" and slurm_cluster.field(job, "ExitCode") == "0:0"
    assert f"job {job} on {slurm_cluster.host}" in (tmp_path / f"slurm-{job}.out").read_text()


def test_a_failing_script_ends_failed_with_its_exit_code(slurm_cluster):
    job = slurm_cluster.sbatch("#!/bin/bash\necho about to fail\nexit 3\n")
    assert slurm_cluster.wait_state(job, {"FAILED", "COMPLETED"}) == "FAILED"
    assert slurm_cluster.field(job, "ExitCode") == "3:0"
    assert slurm_cluster.output(job).splitlines()[-1] == "about to fail"


def test_srun_in_a_batch_script_starts_one_task_per_rank(slurm_cluster):
    job = slurm_cluster.sbatch("#!/bin/bash\n#SBATCH --ntasks=4\nsrun bash -c 'echo rank $SLURM_PROCID of $SLURM_NTASKS'\n")
    assert slurm_cluster.wait_state(job, {"COMPLETED", "FAILED"}) == "COMPLETED"
    ranks = sorted(line for line in slurm_cluster.output(job).splitlines() if line.startswith("rank"))
    assert ranks == [f"rank {i} of 4" for i in range(4)]


def test_srun_with_the_launchers_flags_gives_one_task_all_its_cores(slurm_cluster):
    """The pipeline's shape: one task per node with all its cores, which starts the ranks itself (torchrun).
    --cpu-bind=cores only warns under task/none; --kill-on-bad-exit is accepted."""
    job = slurm_cluster.sbatch(
        "#!/bin/bash\n#SBATCH --nodes=1 --ntasks-per-node=1 --cpus-per-task=4\n"
        'srun --nodes="$SLURM_NNODES" --ntasks-per-node=1 --cpus-per-task=4 --cpu-bind=cores --kill-on-bad-exit=1 '
        "bash -c 'echo task $SLURM_PROCID cpus $SLURM_CPUS_PER_TASK nodes $SLURM_NNODES; "
        "for r in 0 1 2 3; do (echo local rank $r) & done; wait'\n")
    assert slurm_cluster.wait_state(job, {"COMPLETED", "FAILED"}) == "COMPLETED"
    out = slurm_cluster.output(job)
    assert "task 0 cpus 4 nodes 1" in out and out.count("local rank") == 4


def test_scancel_ends_a_running_job_cancelled(slurm_cluster):
    job = slurm_cluster.sbatch(SLEEPER)
    slurm_cluster.wait_state(job, {"RUNNING"})
    deadline = time.monotonic() + 10
    while not _job_processes(slurm_cluster, job) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(cmd.startswith("sleep") for cmd in _job_processes(slurm_cluster, job))
    assert subprocess.run(["scancel", job], timeout=30).returncode == 0
    assert slurm_cluster.wait_state(job, {"CANCELLED"}, timeout=20) == "CANCELLED"
    assert subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout == ""
    assert _job_processes(slurm_cluster, job) == []  # (not just the state: the job's processes are gone too)


def test_more_cpus_than_the_node_has_pends_with_reason_partition_config(slurm_cluster):
    job = slurm_cluster.sbatch("#!/bin/bash\ntrue\n", f"--cpus-per-task={CPU.cpus + 1}")
    time.sleep(1.5)  # a scheduling pass: it stays pending for good
    r = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T %r"], capture_output=True, text=True, timeout=30)
    assert r.stdout.split() == ["PENDING", "PartitionConfig"]
    subprocess.run(["scancel", job], check=True, timeout=30)
    assert slurm_cluster.wait_state(job, {"CANCELLED"}) == "CANCELLED"


def test_gpus_are_refused_where_the_node_has_none(slurm_cluster):
    r = subprocess.run(["sbatch", "--parsable", "--gres=gpu:4", "--wrap", "true"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode != 0 and "Invalid generic resource (gres) specification" in r.stderr


def test_sacct_fails_without_accounting(slurm_cluster):
    job = slurm_cluster.sbatch("#!/bin/bash\ntrue\n")
    slurm_cluster.wait_state(job, {"COMPLETED"})
    r = subprocess.run(["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and r.stdout == "" and "accounting storage is disabled" in r.stderr


def test_sacct_gives_the_final_state_with_accounting(slurm_cluster_accounting):
    c = slurm_cluster_accounting
    done = c.sbatch("#!/bin/bash\ntrue\n")
    failed = c.sbatch("#!/bin/bash\nexit 2\n")
    cancelled = c.sbatch(SLEEPER)
    c.wait_state(cancelled, {"RUNNING"})
    c.run("scancel", cancelled, check=True)
    assert c.sacct_state(done) == "COMPLETED"
    assert c.sacct_state(failed) == "FAILED"
    assert c.sacct_state(cancelled) == "CANCELLED by 0"  # by uid 0: the pipeline keeps the first word


def test_fake_gpus_are_gres_with_cuda_visible_devices(slurm_cluster_gpus):
    c = slurm_cluster_gpus
    assert os.environ["SLURM_CONF"] == str(c.conf)
    job = c.sbatch("#!/bin/bash\n#SBATCH --nodes=1 --ntasks-per-node=1 --gres=gpu:4\n"
                   "srun bash -c 'echo gpus $CUDA_VISIBLE_DEVICES on $SLURM_JOB_PARTITION'\n")
    assert c.wait_state(job, {"COMPLETED", "FAILED"}) == "COMPLETED"
    assert "gpus 0,1,2,3 on booster" in c.output(job)
    r = c.run("sbatch", "--parsable", "--gres=gpu:5", "--wrap", "true")
    assert r.returncode != 0 and "Requested node configuration is not available" in r.stderr


def test_two_nodes_one_task_each_and_their_names_come_from_slurm(slurm_cluster_two_nodes):
    """The launcher's multi-node shape: one task per node; the first node of the allocation is the rendezvous
    host. Here the node names do not resolve (both nodes are this host), Slurm's NodeAddr does."""
    c = slurm_cluster_two_nodes
    job = c.sbatch("#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=1\n"
                   'head="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)"\n'
                   'echo head $head addr $(scontrol show node "$head" | grep -o "NodeAddr=[^ ]*")\n'
                   "srun bash -c 'echo task $SLURM_PROCID of $SLURM_NTASKS on $SLURMD_NODENAME'\n")
    assert c.wait_state(job, {"COMPLETED", "FAILED"}) == "COMPLETED"
    out = c.output(job)
    assert "head n1 addr NodeAddr=127.0.0.1" in out
    assert sorted(line for line in out.splitlines() if line.startswith("task")) == ["task 0 of 2 on n1", "task 1 of 2 on n2"]
    three = c.sbatch("#!/bin/bash\ntrue\n", "--nodes=3")  # more nodes than the partition has: pends
    time.sleep(1.5)
    assert c.run("squeue", "-h", "-j", three, "-o", "%T %r").stdout.split() == ["PENDING", "PartitionConfig"]
    c.run("scancel", three, check=True)


def test_an_ended_job_is_forgotten_after_min_job_age_and_a_dead_controller_reads_differently(slurm_cluster_factory):
    """What a follower sees when it polls late: after MinJobAge slurmctld forgets the job ("Invalid job id
    specified", exit 1); with slurmctld down, the answer is another error (the job may be running), after
    the client's retries (~18 s at the default MessageTimeout=10; ~8 s here)."""
    c = slurm_cluster_factory(settings={"MinJobAge": "2", "MessageTimeout": "3"})
    job = c.sbatch("#!/bin/bash\ntrue\n")
    c.wait_state(job, {"COMPLETED"})
    deadline = time.monotonic() + 30
    while (r := c.run("squeue", "-h", "-j", job, "-t", "all", "-o", "%T")).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert r.returncode == 1 and "Invalid job id specified" in r.stderr
    assert "Invalid job id specified" in c.run("scontrol", "show", "job", job).stderr
    running = c.sbatch(SLEEPER)
    c.wait_state(running, {"RUNNING"})
    ctld = c.procs["slurmctld"]
    ctld.terminate()
    ctld.wait(timeout=15)
    r = c.run("squeue", "-h", "-j", running, "-o", "%T", timeout=90)
    assert r.returncode == 1 and "Unable to contact slurm controller" in r.stderr and "Invalid job id" not in r.stderr


def test_two_clusters_coexist_and_teardown_leaves_no_process(slurm_cluster, slurm_cluster_factory):
    other = slurm_cluster_factory()
    assert other.conf != slurm_cluster.conf and other.ports["slurmctld"] != slurm_cluster.ports["slurmctld"]
    job = other.sbatch(SLEEPER, "--job-name=only-in-other")
    other.wait_state(job, {"RUNNING"})
    assert "only-in-other" not in slurm_cluster.run("squeue", "-h", "-t", "all", "-o", "%j").stdout
    root, daemons = other.root, [p.pid for p in other.procs.values()]
    assert sorted(other.procs) == ["munged", "slurmctld", f"slurmd-{other.host}"]
    assert len(_processes_of(root)) > 3  # + slurmstepd and the job's sleep
    other.stop()
    assert not root.exists() and not _processes_of(root)
    assert not [p for p in daemons if os.path.exists(f"/proc/{p}")]


def test_a_crashed_sessions_cluster_is_reaped_by_the_next(slurm_cluster_factory):
    """A session killed with its cluster running leaves daemons and a folder; the next start ends them."""
    plugin.require()
    code = ("from tests.slurm.cluster import SlurmCluster, CPU\nimport os\n"
            "c = SlurmCluster(CPU, name='crashed').start()\nprint(c.root, flush=True)\n"
            "c.sbatch('#!/bin/bash\\nsleep 300\\n')\nos._exit(0)\n")  # no stop(): the owner dies, daemons live on
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert r.returncode == 0, r.stderr
    root = Path(r.stdout.strip())
    assert root.name.startswith(PREFIX) and _processes_of(root)
    mine = slurm_cluster_factory().root  # a live cluster is not touched by the reaping
    assert root in reap_stale() or not root.exists()
    assert not root.exists() and not _processes_of(root) and mine.exists() and _processes_of(mine)


def test_missing_slurm_skips_on_a_developer_machine_and_fails_under_ci(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(os, "geteuid", lambda: 1000)
        assert "needs root" in (missing() or "")
    monkeypatch.setenv("PATH", "/nonexistent")
    assert "not installed" in (missing() or "") or os.geteuid() != 0
    for env, outcome in (({"CI": "", plugin.REQUIRE_ENV: ""}, pytest.skip.Exception),
                         ({"CI": "true", plugin.REQUIRE_ENV: ""}, pytest.fail.Exception),
                         ({"CI": "", plugin.REQUIRE_ENV: "1"}, pytest.fail.Exception)):
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        with pytest.raises(outcome) as e:
            plugin.require()
        assert "install.sh" in str(e.value) or "root" in str(e.value)


def test_time_limit_ends_timeout(timeout_jobs):
    """Last: the 1-minute jobs submitted by the first test end TIMEOUT (squeue -t all; sacct with accounting)."""
    for kind, (cluster, job) in timeout_jobs.items():
        assert cluster.wait_state(job, {"TIMEOUT"}, timeout=120) == "TIMEOUT", kind
        assert cluster.field(job, "Reason") == "TimeLimit"
        assert "DUE TO TIME LIMIT" in cluster.output(job)
        if kind == "accounting":
            assert cluster.sacct_state(job) == "TIMEOUT"


def _job_processes(cluster: SlurmCluster, job: str, wait_gone_s: float = 10) -> list[str]:
    """Command lines of the job's own processes (SLURM_JOB_ID in their environment). When there are some,
    wait up to `wait_gone_s` for them to go: after scancel the state changes first, the processes within
    KillWait."""
    def now() -> list[str]:
        out = []
        for pid in _processes_of(cluster.root):
            try:
                env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode().strip()
            except OSError:
                continue
            if f"SLURM_JOB_ID={job}".encode() in env:
                out.append(cmd)
        return out

    found, deadline = now(), time.monotonic() + wait_gone_s
    while found and cluster.state(job) not in ("RUNNING", "PENDING") and time.monotonic() < deadline:
        time.sleep(0.1)
        found = now()
    return found
