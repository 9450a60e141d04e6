"""Shared test fixtures: the UDHR demo corpus, small configs written to tmp dirs, one Prefect harness."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

# 2 cores: keep torch/BLAS from oversubscribing them; Prefect offline.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")

from pipeline.config import REPO_ROOT  # noqa: E402

UDHR_DIR = REPO_ROOT / ".cache" / "udhr" / "package" / "declaration"


@pytest.fixture(scope="session")
def udhr_dir() -> Path:
    if not (UDHR_DIR / "eng.html").exists():
        pytest.fail(f"demo corpus missing at {UDHR_DIR}: run `make demo-data` (make test does it for you)")
    return UDHR_DIR


def write_config(tmp_path: Path, body: str, *, engine: str = "local", languages: str = '["all"]') -> Path:
    """A config file whose [run]/[orchestration] suit tests; `body` adds the [ingest] part."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(f"""
        [run]
        name = "test"
        languages = {languages}

        [orchestration]
        engine = "{engine}"
        max_workers = 2
        """) + textwrap.dedent(body),
        encoding="utf-8",
    )
    return path


def udhr_source(udhr_dir: Path, extra: str = "") -> str:
    return textwrap.dedent(f"""
    [[ingest.sources]]
    name = "udhr"
    kind = "udhr"
    path = "{udhr_dir}"
    licence = "public-domain-text"
    homepage = "https://www.unicode.org/udhr/"
    domain = "unicode.org"
    collected = "2024-05"
    {extra}

    [ingest.quality]
    min_words = 10
    """)


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """One temporary Prefect database for the whole session (migrating one costs ~10 s)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def data_run(tmp_path_factory, udhr_dir) -> Path:
    """ingest -> tokenizer -> shards on 6 languages, once per session; tests copy it (tests/runs.py)."""
    from pipeline.cli import main
    from tests.runs import DATA, LANGS, pretrain_section

    tmp = tmp_path_factory.mktemp("pretrain-data")
    cfg = write_config(tmp, udhr_source(udhr_dir) + DATA + pretrain_section(), languages=LANGS)
    run_dir = tmp / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "shards"]) == 0
    return run_dir


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, data_run, udhr_dir) -> tuple[Path, Path]:
    """(config, run dir) after a published 6-step tiny pretrain with checkpoints at steps 3 and 6."""
    from pipeline.cli import main
    from tests.runs import make_run

    cfg, run_dir = make_run(tmp_path_factory.mktemp("trained"), data_run, udhr_dir)
    assert main(["stage", "pretrain", "--config", str(cfg), "--run-dir", str(run_dir)]) == 0
    return cfg, run_dir


@pytest.fixture(autouse=True)
def _prefect_console_outlives_capture():
    """Prefect's console log handler keeps the stream that was sys.stderr when logging was first set up; if a
    test captured output (capsys) at that moment, later tests would log into a closed stream. Re-point it."""
    yield
    import logging
    import sys

    loggers = [logging.getLogger()] + [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    handlers = [h for lg in loggers for h in lg.handlers if type(h).__name__ == "PrefectConsoleHandler"]
    for h in handlers:
        h.stream = sys.stderr  # not setStream(): it flushes the old, closed stream
        h.console.file = sys.stderr
