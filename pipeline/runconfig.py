"""Which configuration a command uses, and the run's own copy of it (run.toml).

A run directory remembers its resolved configuration, so `europa status --run-dir R` and
`europa stage S --run-dir R` need no --config. Passing --config replaces the remembered one; the fingerprints
then decide which stages became stale.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pipeline.config import DEFAULT_CONFIG, ConfigError, PipelineConfig, dump_toml, load_config
from pipeline.errors import UsageError
from pipeline.fsutil import atomic_write_text
from pipeline.rundir import RunDir
from pipeline.secrets import redact


def load_run_config(run_dir: RunDir) -> PipelineConfig:
    path = run_dir.config_path
    if not path.exists():
        raise ConfigError(f"{path}: this run directory has no run.toml; run `europa run --config FILE --run-dir {run_dir.path}` first")
    return load_config(path, data=tomllib.loads(path.read_text(encoding="utf-8")))


def resolve(config_path: str | None, run_dir_path: str | None, *, existing: bool = False) -> tuple[RunDir, PipelineConfig]:
    """--config wins; else the run directory's run.toml; else the embedded demo config.

    `existing`: the command only reads a run (status, evaluate, verify): a run directory that does not exist is
    an error naming it, never created."""
    if run_dir_path is not None:
        if not run_dir_path.strip():  # Path("") is ".", so only the string can tell
            raise UsageError("--run-dir is empty; pass a folder (new or an existing run), or leave --run-dir out "
                             "for runs/<[run] name>")
        check_run_dir_path(Path(run_dir_path), existing=existing)
    if config_path is None and run_dir_path is not None and RunDir(run_dir_path).config_path.exists():
        rd = RunDir(run_dir_path)
        return rd, load_run_config(rd)
    config = load_config(Path(config_path) if config_path else DEFAULT_CONFIG)
    rd = RunDir(run_dir_path) if run_dir_path else RunDir(Path("runs") / config.run.name)
    if run_dir_path is None:
        check_run_dir_path(rd.path, existing=existing)
    return rd, config


def describe_source(config_path: str | None, run_dir: RunDir) -> str:
    """Which configuration a command runs with, in words (printed, so nobody runs the demo by surprise)."""
    if config_path:
        return f"config {Path(config_path).resolve()}"
    if run_dir.config_path.exists():
        return f"the run's own {run_dir.config_path}"
    return f"the embedded demo config {DEFAULT_CONFIG} (pass --config FILE for your own)"


def check_run_dir_path(path: Path, *, existing: bool) -> None:
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path}: is a file, not a run directory; pass --run-dir a folder (new or an existing run)")
    if existing and not path.is_dir():
        raise UsageError(f"{path}: no such run directory; check --run-dir (a run is created by `europa run`)")


def save_run_config(run_dir: RunDir, config: PipelineConfig) -> None:
    run_dir.path.mkdir(parents=True, exist_ok=True)
    header = "# The resolved configuration of this run, written by europa. Edit the source config instead.\n"
    text = header + dump_toml(redact(config.to_dict()))
    if not run_dir.config_path.exists() or run_dir.config_path.read_text(encoding="utf-8") != text:
        atomic_write_text(run_dir.config_path, text)
