"""One small real run for the shards tests: 6 UDHR languages, several ingest files each, shards of 4 KB."""

from __future__ import annotations

import pytest

from pipeline.cli import main
from tests.conftest import udhr_source, write_config
from tests.runs import LANGS
BODY = """
[ingest]
max_rows_per_file = 8
[tokenizer]
vocab_size = 1500
reserved_tokens = 2
[shards]
val_fraction = 0.1
shard_bytes = 4096
[shards.mixture]
max_epochs = 2
total_tokens = 100000
"""


@pytest.fixture(scope="session")
def run(tmp_path_factory, udhr_dir):
    """ingest -> tokenizer -> shards, once; tests that change it work on a copy."""
    tmp = tmp_path_factory.mktemp("shards")
    cfg = write_config(tmp, udhr_source(udhr_dir) + BODY, languages=LANGS)
    run_dir = tmp / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "shards"]) == 0
    return run_dir
