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


def duplicates_source(folder: Path, udhr_dir: Path, langs: tuple[str, ...] = ("de", "mt")) -> str:
    """A JSONL source with duplicates across units: per language three files of UDHR articles, the later two with
    an exact copy (other case and spacing) and a near copy (one word changed) of articles of the first, and
    `max_unit_bytes` so small that every file is cut into several units. Next to the UDHR source its articles
    are also exact duplicates across sources. The runners must all agree on it."""
    import json

    from stages.ingest.config import SourceConfig
    from stages.ingest.inputs import list_inputs
    from stages.ingest.readers import RawDoc, read_input

    udhr = SourceConfig(name="u", kind="udhr", path=str(udhr_dir), licence="x", collected="2024-05")
    for lang in langs:
        docs = [d.text for d in read_input(udhr, lang, list_inputs(udhr, lang)[0]) if isinstance(d, RawDoc)]
        docs = [t for t in docs if len(t.split()) >= 40]
        near = docs[3].split()
        near[7] = near[7][::-1]
        files = [docs[0:6], [docs[6], "  " + docs[1].upper() + " ", docs[7]], [" ".join(near), docs[8], docs[9]]]
        (folder / lang).mkdir(parents=True, exist_ok=True)
        for i, texts in enumerate(files):
            (folder / lang / f"{i}.jsonl").write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts),
                                                       encoding="utf-8")
    return textwrap.dedent(f"""
    [[ingest.sources]]
    name = "dups"
    kind = "jsonl"
    path = "{folder}/{{lang}}/*.jsonl"
    languages = {json.dumps(list(langs))}
    licence = "CC-BY-4.0"
    collected = "2025-01"
    [ingest]
    max_unit_bytes = 2500
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
