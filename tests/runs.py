"""Small real runs for the model-side tests: 6 UDHR languages through ingest, tokenizer and shards, then a few
tiny training steps. The session fixtures that build them live in tests/conftest.py."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.conftest import udhr_source, write_config

LANGS = '["de", "el", "ga", "mt", "bg", "fi"]'
DATA = """
[tokenizer]
vocab_size = 1000
reserved_tokens = 2
[shards]
val_fraction = 0.1
shard_bytes = 8192
"""


def pretrain_section(**overrides) -> str:
    """A [pretrain] section for a few-second tiny run; keyword overrides are TOML lines (key=value)."""
    lines = {"flavor": '"tiny"', "seq_len": "64", "local_batch_size": "4", "steps": "6", "log_every": "1"}
    lines.update({k: v for k, v in overrides.items() if "." not in k})
    body = "[pretrain]\n" + "".join(f"{k} = {v}\n" for k, v in lines.items())
    tables: dict[str, dict[str, str]] = {"schedule": {"warmup_steps": "2"}, "checkpoint": {"interval": "3"}}
    for k, v in overrides.items():
        if "." in k:
            table, key = k.split(".", 1)
            tables.setdefault(table, {})[key] = v
    for table, entries in tables.items():
        body += f"[pretrain.{table}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
    return body


def make_run(tmp_path: Path, data_run: Path, udhr_dir: Path, **overrides) -> tuple[Path, Path]:
    """A copy of the data run plus a config with the given [pretrain] settings: (config path, run dir)."""
    run_dir = tmp_path / "run"
    shutil.copytree(data_run, run_dir, ignore=shutil.ignore_patterns(".lock", "run.toml", "pretrain", ".work", ".state"))
    cfg = write_config(tmp_path, udhr_source(udhr_dir) + DATA + pretrain_section(**overrides), languages=LANGS)
    return cfg, run_dir
