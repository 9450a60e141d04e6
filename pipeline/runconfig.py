"""Which configuration a command uses, and the run's own copy of it (run.toml).

A run directory remembers its resolved configuration, so `europa status --run-dir R` and
`europa stage S --run-dir R` need no --config. Passing --config replaces the remembered one; the fingerprints
then decide which stages became stale.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pipeline.config import DEFAULT_CONFIG, ConfigError, PipelineConfig, dump_toml, load_config
from pipeline.fsutil import atomic_write_text
from pipeline.rundir import RunDir
from pipeline.secrets import redact


def load_run_config(run_dir: RunDir) -> PipelineConfig:
    path = run_dir.config_path
    if not path.exists():
        raise ConfigError(f"{path}: this run directory has no run.toml; run `europa run --config FILE --run-dir {run_dir.path}` first")
    return load_config(path, data=tomllib.loads(path.read_text(encoding="utf-8")))


def resolve(config_path: str | None, run_dir_path: str | None) -> tuple[RunDir, PipelineConfig]:
    """--config wins; else the run directory's run.toml; else the embedded demo config."""
    if config_path is None and run_dir_path is not None and RunDir(run_dir_path).config_path.exists():
        rd = RunDir(run_dir_path)
        return rd, load_run_config(rd)
    config = load_config(Path(config_path) if config_path else DEFAULT_CONFIG)
    rd = RunDir(run_dir_path) if run_dir_path else RunDir(Path("runs") / config.run.name)
    return rd, config


def save_run_config(run_dir: RunDir, config: PipelineConfig) -> None:
    run_dir.path.mkdir(parents=True, exist_ok=True)
    header = "# The resolved configuration of this run, written by europa. Edit the source config instead.\n"
    text = header + dump_toml(redact(config.to_dict()))
    if not run_dir.config_path.exists() or run_dir.config_path.read_text(encoding="utf-8") != text:
        atomic_write_text(run_dir.config_path, text)
