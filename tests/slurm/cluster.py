"""A real Slurm on localhost, owned by the tests: munged, slurmctld, one slurmd per node (and, for `sacct`,
MariaDB + slurmdbd), each started in the foreground by this module and stopped by its pid.

Why a real one: the pretrain stage's Slurm path (render, sbatch, squeue/sacct, scancel, time limits, srun)
was tested with stand-in scripts that answer what we believed Slurm answers. A real slurmctld shows what
they hide (an ended job vanishes from `squeue`; `sacct` fails without accounting; a job asking for more than
a node has pends with reason PartitionConfig). See docs/slurm-testing.md for what it can and cannot show.

Everything lives in one private folder (config, munge key and socket, state, spool, logs, pid files,
database), so a cluster never reads or disturbs a system Slurm/munge/MariaDB: its own munged socket
(`AuthInfo=socket=`, and `AccountingStoragePass=` for the slurmdbd connection, which otherwise uses the
default socket), its own free TCP ports, its own slurm.conf found through SLURM_CONF. The folder is under
/tmp (not pytest's 0700 tmp dirs) because munged runs as the `munge` user and must reach its socket.

No systemd and no cgroups: proctrack/linuxproc + task/none; scancel and time limits still kill every task.
A crashed earlier session cannot block a new one (fresh folder and ports every time), and `reap_stale()`
stops what it left running: each folder records its owner process; daemons and job processes of a folder
whose owner is gone are found by the folder's path in their command line or SLURM_CONF, and ended by pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

PREFIX = "europa-slurm-"          # /tmp/europa-slurm-<name>-XXXX: how reap_stale() recognises our folders
OWNER_FILE = "owner"              # "<pid> <start ticks>" of the process that started the cluster
CLIENTS = ("sbatch", "squeue", "scancel", "scontrol", "sinfo", "srun")
DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd")
ACCOUNTING_TOOLS = ("slurmdbd", "sacct", "sacctmgr", "mariadbd", "mariadb-install-db", "mariadb")
PACKAGES_HINT = "tests/slurm/install.sh (apt-get install slurm-wlm munge slurmdbd mariadb-server)"


@dataclass(frozen=True)
class Profile:
    """The node the cluster advertises. `cpus` may exceed the real core count (SlurmdParameters=
    config_overrides): tests then know the node's size exactly, whatever machine runs them."""
    name: str
    partition: str
    cpus: int = 8
    memory_mb: int = 8000
    gpus: int = 0               # > 0: Gres=gpu:N backed by /dev/tty1..N (there are no real GPUs)
    nodes: int = 1              # > 1: one slurmd per node on this host (`slurmd -N n1`, own port), named n1..nN

    def node_names(self, host: str) -> list[str]:
        """One node: the host's own name (it resolves, as on a real cluster). More: n1..nN, which do not
        resolve (all share 127.0.0.1): code that needs a node's address must ask Slurm (NodeAddr)."""
        return [host] if self.nodes == 1 else [f"n{i}" for i in range(1, self.nodes + 1)]

    @property
    def gpu_files(self) -> list[str]:
        return [f"/dev/tty{i}" for i in range(1, self.gpus + 1)]


CPU = Profile("cpu", partition="cpu")
FAKE_GPUS = Profile("gpus", partition="booster", gpus=4)  # JUPITER's partition name and 4 "GPUs" per node
TWO_NODES = Profile("two-nodes", partition="cpu", cpus=4, memory_mb=4000, nodes=2)


class ClusterError(RuntimeError):
    """The cluster could not start or stop; the message carries the tail of the daemon's log."""


def missing(profile: Profile = CPU, accounting: bool = False) -> str | None:
    """Why this machine cannot run such a cluster (one line), or None when it can."""
    if os.geteuid() != 0:
        return "a localhost Slurm needs root (slurmd starts jobs as any user; munged runs as `munge`)"
    tools = [*DAEMONS, *CLIENTS, *(ACCOUNTING_TOOLS if accounting else ())]
    absent = [t for t in tools if shutil.which(t) is None]
    if absent:
        return f"Slurm/munge{'/MariaDB' if accounting else ''} not installed ({', '.join(absent)} missing): run {PACKAGES_HINT}"
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return f"no `munge` user (the munge package creates it): run {PACKAGES_HINT}"
    absent = [f for f in profile.gpu_files if not os.path.exists(f)]
    if absent:
        return f"profile {profile.name}: the fake GPU device files {', '.join(absent)} do not exist on this machine"
    return None


def free_ports(n: int) -> list[int]:
    """n TCP ports free on all interfaces now (held open together, so they differ from each other)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _start_ticks(pid: int) -> str | None:
    """Process start time in clock ticks since boot (field 22 of /proc/PID/stat): tells a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _processes_of(root: Path) -> list[int]:
    """Pids of processes that belong to the cluster in `root`: its path in their command line (munged,
    mariadbd, the slurm daemons get `-f <root>/etc/slurm.conf`) or in their SLURM_CONF (slurmstepd and the
    job's own processes inherit it from the submitting environment)."""
    needle, conf = str(root).encode(), f"SLURM_CONF={root}/".encode()
    pids, mine = [], _ancestors()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in mine:
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in cmdline or any(v.startswith(conf) for v in environ.split(b"\0")):
            pids.append(int(entry.name))
    return pids


def _ancestors() -> set[int]:
    """This process and its parents: a shell that exported SLURM_CONF of a cluster is never ended."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return out


def _kill_all(pids: list[int], wait_s: float = 10.0) -> list[int]:
    """SIGTERM each pid, SIGKILL those still there after `wait_s`; returns the pids that survived even that."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    return [p for p in alive if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap our own children so they do not linger as zombies
    except ChildProcessError:
        pass
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def reap_stale(tmp: Path | None = None) -> list[Path]:
    """Stop and remove the clusters that crashed sessions left behind: folders whose owner process is gone.
    Returns the folders removed. Clusters of live sessions (another pytest running now) are left alone."""
    removed = []
    for root in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        owner = root / OWNER_FILE
        try:
            pid_s, ticks = owner.read_text().split()
        except (OSError, ValueError):
            # a folder still being set up by a live session has its owner file within milliseconds
            if time.time() - root.stat().st_mtime < 60:
                continue
        else:
            if _start_ticks(int(pid_s)) == ticks:
                continue
        _kill_all(_processes_of(root))
        shutil.rmtree(root, ignore_errors=True)
        removed.append(root)
    return removed


class SlurmCluster:
    """One localhost cluster. `start()` returns it ready (node idle); `stop()` cancels every job, ends every
    daemon and job process by pid and removes the folder (keep=True keeps it for reading logs).

        with SlurmCluster(CPU) as c:
            job = c.sbatch("#!/bin/bash\\nsrun hostname\\n")
            assert c.wait_state(job, {"COMPLETED"}) == "COMPLETED"

    Commands run through `c.run(...)` (SLURM_CONF set) or in the caller's process after `c.activate()`.
    `settings` adds or overrides slurm.conf keys (e.g. {"MinJobAge": "2"}).
    """

    def __init__(self, profile: Profile = CPU, *, accounting: bool = False, settings: dict[str, str] | None = None,
                 name: str | None = None, keep: bool = False):
        self.profile, self.accounting, self.keep = profile, accounting, keep
        self.settings = dict(settings or {})
        self.name = name or f"{profile.name}{'-acct' if accounting else ''}"
        self.host = socket.gethostname().split(".")[0]
        self.root: Path | None = None
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self.nodes: list[str] = []
        self.start_s: float | None = None
        self.first_job_id = 1000 + secrets.randbelow(8000)

    # --- paths and environment ---------------------------------------------------------------------------
    @property
    def conf(self) -> Path:
        return self._root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self._root / "munge-run" / "munge.socket"

    @property
    def log_dir(self) -> Path:
        return self._root / "log"

    @property
    def _root(self) -> Path:
        if self.root is None:
            raise ClusterError("the cluster has no folder yet: call start() first")
        return self.root

    @property
    def env(self) -> dict[str, str]:
        """The environment for Slurm commands against this cluster (the caller's plus SLURM_CONF)."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    @contextlib.contextmanager
    def activate(self) -> Iterator[SlurmCluster]:
        """Export SLURM_CONF in this process (what the pipeline's own sbatch/squeue calls read); restore after."""
        before = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = str(self.conf)
        try:
            yield self
        finally:
            if before is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = before

    # --- start / stop ---------------------------------------------------------------------------------------
    def __enter__(self) -> SlurmCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        reason = missing(self.profile, self.accounting)
        if reason:
            raise ClusterError(reason)
        reap_stale()
        t0 = time.monotonic()
        for attempt in range(3):  # a port taken between choosing and binding it: choose again
            self._make_folder()
            try:
                self._start_daemons(timeout)
                break
            except ClusterError as e:
                self.stop(keep=self.keep or attempt == 2)
                if "in use" not in str(e) or attempt == 2:
                    raise
        self.start_s = time.monotonic() - t0
        return self

    def _make_folder(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{self.name}-"))
        self.root.chmod(0o755)
        (self.root / OWNER_FILE).write_text(f"{os.getpid()} {_start_ticks(os.getpid())}\n")
        for sub in ("etc", "state", "spool", "log", "run"):
            (self.root / sub).mkdir()
        munge = pwd.getpwnam("munge")
        for sub, mode in (("munge", 0o700), ("munge-run", 0o755)):  # key+seed private; socket dir reachable
            d = self.root / sub
            d.mkdir(mode=mode)
            os.chown(d, munge.pw_uid, munge.pw_gid)
        (self.root / "log" / "munge").mkdir(mode=0o700)
        os.chown(self.root / "log" / "munge", munge.pw_uid, munge.pw_gid)
        self.nodes = self.profile.node_names(self.host)
        names = ["slurmctld", *(f"slurmd-{n}" for n in self.nodes), *(["slurmdbd", "mariadb"] if self.accounting else [])]
        self.ports = dict(zip(names, free_ports(len(names))))
        (self.root / "etc" / "plugstack.conf").write_text("")  # not /etc/slurm/plugstack.conf's plugins
        self.conf.write_text(self.slurm_conf())
        if self.profile.gpus:
            (self.root / "etc" / "gres.conf").write_text(
                "".join(f"NodeName={n} Name=gpu File=/dev/tty[1-{self.profile.gpus}]\n" for n in self.nodes))

    def slurm_conf(self) -> str:
        r, p = self._root, self.profile
        keys: dict[str, str] = {
            "ClusterName": self.name.replace("-", "_"),
            "SlurmctldHost": f"{self.host}(127.0.0.1)",
            "SlurmctldPort": str(self.ports["slurmctld"]),
            "SlurmdPort": str(self.ports[f"slurmd-{self.nodes[0]}"]),  # each node line names its own Port
            "SlurmUser": "root", "SlurmdUser": "root",
            "AuthType": "auth/munge", "CredType": "cred/munge",
            "AuthInfo": f"socket={self.munge_socket}",
            "StateSaveLocation": f"{r}/state", "SlurmdSpoolDir": f"{r}/spool/%n",
            "SlurmctldPidFile": f"{r}/run/slurmctld.pid", "SlurmdPidFile": f"{r}/run/slurmd-%n.pid",
            "SlurmctldLogFile": f"{r}/log/slurmctld.log", "SlurmdLogFile": f"{r}/log/slurmd-%n.log",
            "PlugStackConfig": f"{r}/etc/plugstack.conf",
            "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_Core",
            "ProctrackType": "proctrack/linuxproc", "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none", "MpiDefault": "none",
            "ReturnToService": "2", "SlurmdParameters": "config_overrides",
            "KillWait": "2",  # seconds from SIGTERM to SIGKILL at scancel / time limit (default 30)
            "AccountingStorageType": "accounting_storage/none",
            # job ids set each job's rendezvous port (20000 + id % 10000): clusters started side by side by the
            # test workers must not all count from 1, or their first two-node jobs share one port on 127.0.0.1
            "FirstJobId": str(self.first_job_id),
        }
        if self.accounting:
            keys.update({
                "AccountingStorageType": "accounting_storage/slurmdbd",
                "AccountingStorageHost": "127.0.0.1",
                "AccountingStoragePort": str(self.ports["slurmdbd"]),
                "AccountingStoragePass": str(self.munge_socket),  # the munge socket for slurmdbd connections
            })
        if p.gpus:
            keys["GresTypes"] = "gpu"
        keys.update(self.settings)
        nodes = "".join(
            f"NodeName={n} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={self.ports[f'slurmd-{n}']} "
            f"CPUs={p.cpus} Boards=1 SocketsPerBoard=1 CoresPerSocket={p.cpus} ThreadsPerCore=1 "
            f"RealMemory={p.memory_mb}" + (f" Gres=gpu:{p.gpus}" if p.gpus else "") + " State=UNKNOWN\n"
            for n in self.nodes)
        part = f"PartitionName={p.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        return "".join(f"{k}={v}\n" for k, v in keys.items()) + nodes + part

    def _spawn(self, name: str, cmd: list[str], **kw) -> subprocess.Popen:
        out = open(self.log_dir / f"{name}.stdout", "ab")
        env = {"PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"), "SLURM_CONF": str(self.conf)}
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, **kw)  # own session: a Ctrl-C in pytest does not hit it
        out.close()
        self.procs[name] = proc
        return proc

    def _wait(self, name: str, ready, timeout: float, log: Path | None = None) -> None:
        """Until ready() is true; fails with the daemon's log tail when it exits or takes too long."""
        proc, deadline = self.procs[name], time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise ClusterError(f"{name} exited with {proc.returncode} while starting: {self._tail(name, log)}")
            if time.monotonic() > deadline:
                raise ClusterError(f"{name} not ready after {timeout:.0f} s: {self._tail(name, log)}")
            time.sleep(0.05)

    def _tail(self, name: str, log: Path | None = None, n: int = 6) -> str:
        lines: list[str] = []
        for path in (log, self.log_dir / f"{name}.log", self.log_dir / f"{name}.stdout"):
            if path and path.exists():
                lines += path.read_text(errors="replace").splitlines()[-n:]
        return " | ".join(lines[-n:]) or "(no log)"

    def _ok(self, *cmd: str) -> bool:
        return subprocess.run(cmd, env=self.env, capture_output=True, timeout=30).returncode == 0

    def _start_daemons(self, timeout: float) -> None:
        r = self._root
        munge = pwd.getpwnam("munge")
        subprocess.run(["mungekey", "--create", "--keyfile", str(r / "munge" / "munge.key")], check=True,
                       capture_output=True, user=munge.pw_uid, group=munge.pw_gid, extra_groups=[])
        self._spawn("munged", ["munged", "--foreground", "--socket", str(self.munge_socket),
                               "--key-file", str(r / "munge" / "munge.key"), "--seed-file", str(r / "munge" / "seed"),
                               "--pid-file", str(r / "munge-run" / "munged.pid"),
                               "--log-file", str(r / "log" / "munge" / "munged.log")],
                    user=munge.pw_uid, group=munge.pw_gid, extra_groups=[])
        self._wait("munged", lambda: self.munge_socket.exists(), timeout, r / "log" / "munge" / "munged.log")
        if self.accounting:
            self._start_accounting(timeout)
        conf = str(self.conf)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", conf])
        self._wait("slurmctld", lambda: self._ok("scontrol", "ping"), timeout)
        for n in self.nodes:
            self._spawn(f"slurmd-{n}", ["slurmd", "-D", "-N", n, "-f", conf])
        for n in self.nodes:
            self._wait(f"slurmd-{n}", lambda: self.node_state() == "idle", timeout)
        if self.profile.gpus:
            gres = self.run("scontrol", "show", "node").stdout
            if gres.count(f"Gres=gpu:{self.profile.gpus}") != len(self.nodes):
                raise ClusterError(f"slurmd does not advertise gpu:{self.profile.gpus}: {gres.strip()[:300]}")

    def _start_accounting(self, timeout: float) -> None:
        r, port = self._root, self.ports["mariadb"]
        db, sock = r / "mariadb", r / "run" / "mariadb.sock"
        init = subprocess.run(["mariadb-install-db", "--no-defaults", f"--datadir={db}", "--user=root",
                               "--auth-root-authentication-method=socket", "--skip-test-db"],
                              capture_output=True, text=True, timeout=120)
        if init.returncode:
            raise ClusterError(f"mariadb-install-db failed: {init.stdout[-300:]} {init.stderr[-300:]}")
        self._spawn("mariadb", ["mariadbd", "--no-defaults", f"--datadir={db}", f"--socket={sock}", f"--port={port}",
                                "--bind-address=127.0.0.1", "--skip-name-resolve", "--user=root", "--skip-log-bin",
                                f"--pid-file={r}/run/mariadb.pid", f"--log-error={r}/log/mariadb.log",
                                "--innodb-buffer-pool-size=32M"])
        client = ["mariadb", "--no-defaults", f"--socket={sock}", "-u", "root"]
        self._wait("mariadb", lambda: self._ok(*client, "-e", "SELECT 1"), timeout)
        password = secrets.token_hex(12)
        subprocess.run([*client, "-e", f"CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}'; "
                        "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"], check=True, capture_output=True)
        dbd_conf = r / "etc" / "slurmdbd.conf"  # slurmdbd reads it next to SLURM_CONF; it must be 0600
        dbd_conf.touch(mode=0o600)
        dbd_conf.write_text("".join(f"{k}={v}\n" for k, v in {
            "AuthType": "auth/munge", "AuthInfo": f"socket={self.munge_socket}",
            "DbdHost": self.host, "DbdAddr": "127.0.0.1", "DbdPort": str(self.ports["slurmdbd"]),
            "SlurmUser": "root", "StorageType": "accounting_storage/mysql",
            "StorageHost": "127.0.0.1", "StoragePort": str(port), "StorageUser": "slurm",
            "StoragePass": password, "StorageLoc": "slurm_acct_db",
            "LogFile": f"{r}/log/slurmdbd.log", "PidFile": f"{r}/run/slurmdbd.pid",
        }.items()))
        self._spawn("slurmdbd", ["slurmdbd", "-D"])
        self._wait("slurmdbd", lambda: _listening(self.ports["slurmdbd"]), timeout)

    def stop(self, keep: bool | None = None) -> None:
        """Cancel every job, end the daemons (reverse start order) and every leftover process of this
        cluster by pid, then remove the folder unless kept. Safe to call twice, or after a failed start."""
        if self.root is None:
            return
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            ids = self.run("squeue", "-h", "-o", "%i").stdout.split()
            if ids:
                self.run("scancel", *ids)
                deadline = time.monotonic() + 15
                while self.run("squeue", "-h", "-o", "%i").stdout.strip() and time.monotonic() < deadline:
                    time.sleep(0.1)
        for name in (*(f"slurmd-{n}" for n in self.nodes), "slurmctld", "slurmdbd", "mariadb", "munged"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        # slurmstepd and job processes outlive slurmd (only when jobs could not be cancelled: slurmctld dead)
        survivors = _kill_all(_processes_of(self.root), wait_s=3)
        if survivors:
            raise ClusterError(f"processes of {self.root} survived SIGKILL: {survivors}")
        if not (self.keep if keep is None else keep):
            shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    # --- using it -----------------------------------------------------------------------------------------
    def run(self, *cmd: str, check: bool = False, timeout: float = 60) -> subprocess.CompletedProcess:
        """A Slurm command against this cluster; output as text."""
        return subprocess.run(list(cmd), env=self.env, capture_output=True, text=True, timeout=timeout, check=check)

    def node_state(self) -> str:
        """"idle" when every node is; else the distinct states, space-separated ("" without an answer)."""
        r = self.run("sinfo", "-h", "-N", "-o", "%T")
        return " ".join(sorted(set(r.stdout.split()))) if r.returncode == 0 else ""

    def sbatch(self, script: str | Path, *options: str, cwd: Path | None = None) -> str:
        """Submit a script (its text, or a path) with `sbatch --parsable`; returns the job id. Text is written
        to <folder>/jobs/ and its output goes there too unless an --output option or #SBATCH line says."""
        if isinstance(script, str):
            jobs = self._root / "jobs"
            jobs.mkdir(exist_ok=True)
            path = jobs / f"job-{time.monotonic_ns()}.sh"
            path.write_text(script)
            if "--output" not in script and not any(o.startswith(("--output", "-o")) for o in options):
                options = (f"--output={jobs}/slurm-%j.out", *options)
        else:
            path = Path(script)
        r = subprocess.run(["sbatch", "--parsable", *options, str(path)], env=self.env, capture_output=True,
                           text=True, timeout=60, cwd=cwd or self._root)
        if r.returncode:
            raise ClusterError(f"sbatch refused {path}: {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def output(self, job_id: str) -> str:
        """The job's output file when sbatch() chose it (<folder>/jobs/slurm-<id>.out)."""
        path = self._root / "jobs" / f"slurm-{job_id}.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def state(self, job_id: str) -> str:
        """The job's state as slurmctld holds it, ended jobs included (`squeue -t all`) until MinJobAge."""
        r = self.run("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T")
        return r.stdout.strip()

    def field(self, job_id: str, key: str) -> str:
        """One field of `scontrol show job` (e.g. JobState, Reason, ExitCode)."""
        out = self.run("scontrol", "show", "job", str(job_id)).stdout
        for word in out.split():
            if word.startswith(f"{key}="):
                return word.split("=", 1)[1]
        return ""

    def wait_state(self, job_id: str, states: set[str] | frozenset[str], timeout: float = 60) -> str:
        """Poll (every 0.1 s) until the job's state is one of `states`; returns it, or fails naming the last."""
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            last = self.state(job_id)
            if last in states:
                return last
            time.sleep(0.1)
        raise AssertionError(f"job {job_id} still {last or '(unknown)'} after {timeout:.0f} s, not in "
                             f"{sorted(states)}; output: {self.output(job_id)[-500:]!r}")

    def sacct_state(self, job_id: str, timeout: float = 30) -> str:
        """The final state as accounting records it (`sacct -n -X -P -j ID -o State`); slurmctld sends it to
        slurmdbd shortly after the end, so poll until it is not a running one."""
        deadline, last = time.monotonic() + timeout, ""
        while time.monotonic() < deadline:
            r = self.run("sacct", "-n", "-X", "-P", "-j", str(job_id), "-o", "State")
            last = r.stdout.strip()
            if r.returncode == 0 and last and last not in ("PENDING", "RUNNING", "COMPLETING", "REQUEUED"):
                return last
            time.sleep(0.2)
        raise AssertionError(f"sacct has no final state for job {job_id} after {timeout:.0f} s (last: {last!r})")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0
