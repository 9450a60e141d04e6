"""A dedup group with more verified pairs than [ingest.dedup] cluster_unit_pairs is clustered as connected
components in rounds of partitioned units (steps components-001, ...), never in one unit: the published data
is that of the one-unit components rule, for two partition counts, and kill -9 in a round then a rerun gives the
same bytes. Chains of near copies (each copy one word further from the first) make components and greedy
differ and need several rounds."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import write_config
from tests.ingest.test_ingest_stage import KILLER, PY, manifest, read_lang, run_ingest, udhr_docs

LANGS = ("de", "mt")


def chained_corpus(folder: Path, udhr_dir: Path) -> None:
    """Per language, chains of 7 copies of each of 4 long UDHR articles, copy k with k words reversed, in 4
    files; the articles themselves are far apart."""
    for lang in LANGS:
        docs = sorted((t for t in udhr_docs(udhr_dir, lang) if len(t.split()) >= 80), key=len)[:4]
        texts = []
        for doc in docs:
            words = doc.split()
            for k in range(7):
                copy = list(words)
                for j in range(k):
                    at = 5 + j * (len(words) - 10) // 7
                    copy[at] = copy[at][::-1] + "x"
                texts.append(" ".join(copy))
        (folder / lang).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            (folder / lang / f"{i}.jsonl").write_text(
                "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts[i::4]), encoding="utf-8")


def config(tmp_path: Path, udhr_dir: Path, files_per_unit: int = 2, **dedup) -> Path:
    chained_corpus(tmp_path / "in", udhr_dir)
    settings = "".join(f"{k} = {json.dumps(v)}\n" for k, v in dedup.items())
    return write_config(tmp_path, textwrap.dedent(f"""
        [[ingest.sources]]
        name = "chains"
        kind = "jsonl"
        path = "{tmp_path}/in/{{lang}}/*.jsonl"
        languages = {json.dumps(list(LANGS))}
        licence = "CC-BY-4.0"
        collected = "2025-01"
        [ingest]
        files_per_unit = {files_per_unit}
        [ingest.quality]
        min_words = 5
        [ingest.dedup]
        """) + settings, languages=json.dumps(list(LANGS)))


def published(run_dir: Path) -> dict:
    m = manifest(run_dir)
    return {o["path"]: o["sha256"] for o in m["outputs"] if o["path"].startswith(("data/", "rejected/"))}


@pytest.fixture(scope="module")
def one_unit(tmp_path_factory, udhr_dir) -> Path:
    """The reference: rule = "components" in one clusters unit per group."""
    tmp = tmp_path_factory.mktemp("one-unit")
    cfg = config(tmp, udhr_dir, rule="components", partition_docs=5)
    assert run_ingest(cfg, tmp / "run") == 0
    return tmp / "run"


@pytest.mark.parametrize("partition_docs", [5, 11])
def test_rounds_publish_what_one_unit_does(tmp_path, udhr_dir, one_unit, partition_docs):
    cfg = config(tmp_path, udhr_dir, cluster_unit_pairs=0, partition_docs=partition_docs)  # rule greedy: overruled
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    assert published(run_dir) == published(one_unit)
    ref, got = manifest(one_unit)["statistics"], manifest(run_dir)["statistics"]
    for lang in LANGS:
        assert len(read_lang(run_dir, lang)) == 4  # one article of each chain is kept
        r, g = ref["dedup_clusters"][lang], got["dedup_clusters"][lang]
        assert (r["rule"], r["in_rounds"], g["rule"], g["in_rounds"]) == ("components", False, "components", True)
        assert g["kept_by_greedy_not_by_components"] is None and r["kept_by_greedy_not_by_components"] > 0
        assert (g["pairs"], g["docs_in_pairs"], g["components"], g["dropped"], g["largest_component"]) == \
            (r["pairs"], r["docs_in_pairs"], r["components"], r["dropped"], r["largest_component"]) == \
            (g["pairs"], 28, 4, 24, 7)
        assert g["rounds"] >= 2


def test_greedy_keeps_what_components_drop(tmp_path, udhr_dir, one_unit):
    """The default rule in one unit keeps far ends of a chain that components drop; the record counts them."""
    cfg = config(tmp_path, udhr_dir, partition_docs=5)
    assert run_ingest(cfg, tmp_path / "run") == 0
    st = manifest(tmp_path / "run")["statistics"]["dedup_clusters"]
    for lang in LANGS:
        assert st[lang]["rule"] == "greedy" and not st[lang]["in_rounds"]
        kept = len(read_lang(tmp_path / "run", lang))
        assert kept == 4 + st[lang]["kept_by_greedy_not_by_components"] > 4


@pytest.mark.parametrize("step, n", [("components-001", 1), ("components-002", 0), ("clusters", 1)])
def test_kill_9_in_a_round_then_a_rerun_gives_the_same_bytes(tmp_path, udhr_dir, one_unit, step, n):
    cfg = config(tmp_path, udhr_dir, cluster_unit_pairs=0, partition_docs=5)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "OMP_NUM_THREADS": "1"}
    args = ["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)]
    killed = subprocess.run([PY, "-c", KILLER, step, str(n), *args], env=env, capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    assert not (run_dir / "ingest").exists()
    work = next((run_dir / ".work" / "ingest").iterdir())
    assert [p.name for p in (work / step).iterdir() if p.name.startswith(".")]  # the killed unit, unfinished
    assert run_ingest(cfg, run_dir) == 0
    assert published(run_dir) == published(one_unit)


@pytest.mark.parametrize("runner, workers", [("processes", 2), ("threads", 1), ("threads", 4)])
def test_rounds_under_prefect_give_the_same_bytes_for_any_worker_count(tmp_path, udhr_dir, one_unit, runner, workers):
    cfg = config(tmp_path, udhr_dir, cluster_unit_pairs=0, partition_docs=5)
    text = cfg.read_text().replace('engine = "local"', 'engine = "prefect"')
    cfg.write_text(text.replace("max_workers = 2", f'max_workers = {workers}\ntask_runner = "{runner}"'))
    assert run_ingest(cfg, tmp_path / "run") == 0
    assert published(tmp_path / "run") == published(one_unit)
