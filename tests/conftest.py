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
