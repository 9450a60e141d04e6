"""The merge of keys folders before the buckets (stages/ingest/dedup/merge.py): bounded fan-in, same decisions.

Merging step 1's folders in levels of runs of at most fan_in must change no decision and no byte of the later
steps' outputs (the buckets and exact steps sort what they read), for any fan-in and partition count; each unit
opens at most fan_in keys folders; a merge killed mid-write leaves nothing and its rerun is byte-identical.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from stages.ingest.dedup import files
from stages.ingest.dedup.merge import merge_key_folders, merge_levels, partition_ranges
from stages.ingest.minhash import DedupConfig
from tests.ingest.dedup_local import dedup_language
from tests.ingest.test_components_in_the_stage import LANGS, config, published
from tests.ingest.test_ingest_stage import KILLER as STAGE_KILLER, PY, manifest, run_ingest
from tests.ingest.test_dedup_steps import REPO, decisions, language, steps, today, tree_digest, write_units


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("merge")
    ctx, kept = write_units(tmp, language(n_units=7))  # 8 units, one of them empty
    ref_kept, ref_dups = today(ctx, kept)
    return ctx, kept, ref_kept, ref_dups


def test_levels():
    assert merge_levels(8, 256) == [] and merge_levels(8, 8) == []
    assert merge_levels(8, 2) == [4, 2] and merge_levels(8, 3) == [3]
    assert merge_levels(66_000, 256) == [258, 2]  # English: two levels, then 2 folders per buckets unit
    with pytest.raises(ValueError, match="at least 2"):
        merge_levels(8, 1)


def test_partition_ranges_cover_every_partition_once_within_the_buffer():
    rows = np.array([3, 0, 5, 9, 1, 1, 0, 2])
    ranges = list(partition_ranges(rows, 6))
    assert [p for a, b in ranges for p in range(a, b)] == list(range(8))
    assert all(rows[a:b].sum() <= 6 or b - a == 1 for a, b in ranges)  # a partition above the buffer alone


@pytest.mark.parametrize("fan_in, partitions", [(2, 3), (3, 1), (4, 5), (2, 9)])
def test_merged_keys_give_todays_decisions_and_bytes(planted, tmp_path, fan_in, partitions):
    ctx, kept, ref_kept, ref_dups = planted
    cfg = ctx.settings.dedup
    got_kept, got_dups, out = steps(kept, tmp_path / "merged", cfg, partitions, fan_in=fan_in)
    assert got_kept.equals(ref_kept) and got_dups.equals(ref_dups)
    assert len(out.folders.merged) == len(merge_levels(len(kept), fan_in)) >= 1
    top = out.folders.merged[-1]
    assert len(top) <= fan_in
    for level in out.stats.merged:  # each merge unit read at most fan_in folders, and the levels hold every row
        assert all(s.inputs <= fan_in for s in level)
        assert sum(s.docs for s in level) == sum(s.docs for s in out.stats.signatures.values())
        assert sum(s.band_rows for s in level) == sum(s.band_rows for s in out.stats.signatures.values())
    assert len(out.folders.gathered) == len(merge_levels(partitions, fan_in))  # the drops, gathered back
    if out.folders.gathered:
        assert len(out.folders.gathered[-1]) <= fan_in
    plain = dedup_language(kept, tmp_path / "plain", cfg, partitions).folders
    for a, b in [*zip(out.folders.exact, plain.exact), *zip(out.folders.pairs, plain.pairs),
                 (out.folders.clusters, plain.clusters), *zip(out.folders.filtered, plain.filtered)]:
        assert tree_digest(a) == tree_digest(b)  # every output after the merge, byte for byte


def test_a_merge_folder_reads_back_as_its_inputs(planted, tmp_path):
    """Rows map to the same order keys, ids and signatures as in the step-1 folders they came from."""
    ctx, kept, _, _ = planted
    cfg, P = ctx.settings.dedup, 3
    out = dedup_language(kept, tmp_path / "w", cfg, P, fan_in=3)
    step1 = files.key_folders(out.folders.signatures)
    merged = files.key_folders(out.folders.merged[-1])
    docs = np.concatenate([f.order_keys(np.arange(f.docs)) for f in step1])
    assert np.array_equal(np.concatenate([f.order_keys(np.arange(f.docs)) for f in merged]), docs)
    assert files.resolve_ids(merged, docs).equals(files.resolve_ids(step1, docs))
    from stages.ingest.dedup.buckets import _gather_signatures

    assert np.array_equal(_gather_signatures(merged, docs, cfg.num_perm), _gather_signatures(step1, docs, cfg.num_perm))
    for p in range(P):  # each partition in one span per merge folder, holding the step-1 rows of the partition
        for f in merged:
            assert np.load(f.path / files.BAND_INDEX).shape == (P, 1, 2)
        def rows(folders):
            out = []
            for f in folders:
                rec = files.read_partition(f.path, files.BANDS, files.BAND_INDEX, files.BAND_RECORD, p)
                out += zip(rec["band"].tolist(), rec["key"].tolist(), f.order_keys(rec["ordinal"]).tolist())
            return sorted(out)

        assert rows(merged) == rows(step1)


def test_merge_sorted_is_a_stable_merge_holding_one_batch_per_input(tmp_path, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from stages.ingest.dedup import gather

    monkeypatch.setattr(gather, "BATCH_ROWS", 7)
    rng = np.random.default_rng(3)
    paths, rows = [], []
    for i in range(5):
        doc = np.sort(rng.integers(0, 300, rng.integers(0, 60))).astype(np.uint64)  # ties within and across inputs
        t = pa.table({"doc": doc, "rep": np.full(len(doc), i, np.uint64), "rep_id": [f"{i}-{j}" for j in range(len(doc))]},
                     schema=files.DROP_SCHEMA)
        pq.write_table(t, tmp_path / f"{i}.parquet", row_group_size=11)
        paths.append(tmp_path / f"{i}.parquet")
        rows += [(int(d), i, f"{i}-{j}") for j, d in enumerate(doc)]
    n = gather.merge_sorted(paths, "doc", tmp_path / "out.parquet", files.DROP_SCHEMA)
    got = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert n == len(rows) and [(r["doc"], r["rep"], r["rep_id"]) for r in got] == sorted(rows, key=lambda r: r[0])


def test_gathering_partitions_out_of_order_is_refused(planted, tmp_path):
    from stages.ingest.dedup.gather import gather_drops

    ctx, kept, _, _ = planted
    cfg = ctx.settings.dedup
    folders = dedup_language(kept, tmp_path / "w", cfg, 4).folders
    with pytest.raises(ValueError, match="consecutive partitions"):
        gather_drops([folders.exact[1], folders.exact[0]], [], 0, tmp_path / "x", cfg, 4)
    with pytest.raises(ValueError, match="consecutive partitions"):
        gather_drops(folders.exact[1:3], [], 0, tmp_path / "y", cfg, 4)


def test_folders_out_of_rank_order_are_refused(planted, tmp_path):
    ctx, kept, _, _ = planted
    cfg = ctx.settings.dedup
    top = dedup_language(kept, tmp_path / "w", cfg, 2, fan_in=3).folders.merged[-1]
    with pytest.raises(ValueError, match="rank order"):
        files.key_folders(top[::-1])
    with pytest.raises(ValueError, match="dedup settings"):
        merge_key_folders(top, 0, tmp_path / "x", DedupConfig(seed=9), 2)


KILLER = r"""
import json, os, sys
from stages.ingest.dedup import merge
from stages.ingest.minhash import DedupConfig
from stages.ingest.units import MergeStats
from tests.ingest.dedup_local import layout, once
args = json.loads(sys.argv[1])
merge._concat_signatures = lambda *a, **k: os._exit(9)  # like SIGKILL after the records are written
where = layout(args["work"], args["units"], args["partitions"], args["fan_in"])
once(where.merged[0][0], MergeStats, lambda d: merge.merge_key_folders(where.signatures[:args["fan_in"]], 0, d,
                                                                        DedupConfig(), args["partitions"], buffer_rows=64))
"""


def test_killed_merge_leaves_nothing_and_rerun_is_identical(planted, tmp_path):
    ctx, kept, _, _ = planted
    cfg, P, fan_in = ctx.settings.dedup, 3, 4
    assert cfg == DedupConfig()
    ref = dedup_language(kept, tmp_path / "ref", cfg, P, fan_in=fan_in)
    work = tmp_path / "run"
    from tests.ingest.dedup_local import layout
    from stages.ingest.dedup.signatures import write_signatures

    where = layout(work, len(kept), P, fan_in)
    for r, path in enumerate(kept):
        write_signatures(path, where.signatures[r], cfg, P)
    args = json.dumps({"work": str(work), "units": len(kept), "partitions": P, "fan_in": fan_in})
    killed = subprocess.run([sys.executable, "-c", KILLER, args], env={**os.environ, "PYTHONPATH": str(REPO)},
                            capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    target = where.merged[0][0]
    assert not target.exists() and list(target.parent.glob(f".{target.name}.tmp-*"))  # half written, not published
    assert any((t / files.BANDS).exists() for t in target.parent.glob(f".{target.name}.tmp-*"))
    got = dedup_language(kept, work, cfg, P, fan_in=fan_in)
    for a, b in zip(got.folders.merged[0], ref.folders.merged[0]):
        assert tree_digest(a) == tree_digest(b)
    assert decisions(_dups(got)) == decisions(_dups(ref))


def _dups(out):
    from stages.ingest.schema import REJECTED_SCHEMA
    import pyarrow as pa

    return pa.concat_tables(files.read_parts(d, files.DUPLICATE_PARTS, REJECTED_SCHEMA) for d in out.folders.filtered)


# --- in the stage ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def unmerged(tmp_path_factory, udhr_dir):
    """The reference: one documents unit per file (4 per language), fan_in above that: no merge."""
    tmp = tmp_path_factory.mktemp("unmerged")
    assert run_ingest(config(tmp, udhr_dir, files_per_unit=1, partition_docs=5), tmp / "run") == 0
    return tmp / "run"


def _work(run_dir):
    return next((run_dir / ".work" / "ingest").iterdir())


@pytest.mark.parametrize("fan_in, partition_docs", [(2, 5), (3, 11)])
def test_the_stage_merges_above_fan_in_and_publishes_the_same(tmp_path, udhr_dir, unmerged, fan_in, partition_docs):
    cfg = config(tmp_path, udhr_dir, files_per_unit=1, fan_in=fan_in, partition_docs=partition_docs)
    run_dir = tmp_path / "run"
    assert run_ingest(cfg, run_dir) == 0
    assert published(run_dir) == published(unmerged)
    got, ref = manifest(run_dir)["statistics"], manifest(unmerged)["statistics"]
    drops = [3, 2] if partition_docs == 5 else []  # 28 documents: 6 partitions (fan-in 2) or 3 (fan-in 3)
    assert ref["dedup_merges"] == {} and got["dedup_merges"] == {
        lang: {"keys": [2], "rounds": [], "drops": drops} for lang in LANGS}
    assert all(got["dedup_clusters"][lang]["dropped"] == ref["dedup_clusters"][lang]["dropped"] > 0 for lang in LANGS)
    assert got["dedup_buckets"] == ref["dedup_buckets"]  # the buckets do not depend on the partitions
    assert all(ref["dedup_buckets"][lang]["largest_bucket"] >= 2 and ref["dedup_buckets"][lang]["uncompared_pairs"] == 0
               for lang in LANGS)


@pytest.mark.parametrize("step, n", [("merge-001", 0), ("gather-001", 2), ("gather-002", 1)])
def test_kill_9_in_a_merge_or_gather_then_a_rerun_gives_the_same_bytes(tmp_path, udhr_dir, unmerged, step, n):
    cfg = config(tmp_path, udhr_dir, files_per_unit=1, fan_in=2, partition_docs=5)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = ["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)]
    killed = subprocess.run([PY, "-c", STAGE_KILLER, step, str(n), *args], env=env, capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    assert [p.name for p in (_work(run_dir) / step).iterdir() if p.name.startswith(".")]  # one unfinished
    assert run_ingest(cfg, run_dir) == 0
    assert published(run_dir) == published(unmerged)


def test_a_fan_in_below_2_is_one_line(tmp_path, udhr_dir, capsys):
    cfg = config(tmp_path, udhr_dir, fan_in=1)
    assert run_ingest(cfg, tmp_path / "run") == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "fan_in" in lines[0] and "greater than or equal to 2" in lines[0], lines


@pytest.fixture(scope="module")
def rounds_unmerged(tmp_path_factory, udhr_dir):
    """Clustered in rounds of 6 partitions, each round unit reading all 6 folders of the round before."""
    tmp = tmp_path_factory.mktemp("rounds")
    assert run_ingest(config(tmp, udhr_dir, cluster_unit_pairs=0, partition_docs=5), tmp / "run") == 0
    return tmp / "run"


def test_rounds_above_fan_in_read_merged_folders_and_publish_the_same(tmp_path, udhr_dir, rounds_unmerged):
    cfg = config(tmp_path, udhr_dir, cluster_unit_pairs=0, partition_docs=5, fan_in=2)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    args = ["stage", "ingest", "--config", str(cfg), "--run-dir", str(run_dir)]
    # killed in the second merge level of round 1's folders (6 -> 3 -> 2), then rerun
    killed = subprocess.run([PY, "-c", STAGE_KILLER, "components-merge-102", "0", *args], env=env,
                            capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    work = _work(run_dir)
    assert sorted(p.name for p in (work / "components-merge-001").iterdir()) == [
        f"{lang}-{i:05d}" for lang in LANGS for i in range(3)]  # round 0's 6 folders -> 3 -> 2
    assert len(list((work / "components-merge-002").iterdir())) == 4
    assert run_ingest(cfg, run_dir) == 0
    assert published(run_dir) == published(rounds_unmerged)
    got, ref = manifest(run_dir)["statistics"], manifest(rounds_unmerged)["statistics"]
    assert got["dedup_clusters"] == ref["dedup_clusters"] and all(got["dedup_clusters"][g]["in_rounds"] for g in LANGS)
    assert got["dedup_merges"] == {lang: {"keys": [], "rounds": [3, 2], "drops": [3, 2]} for lang in LANGS}


def test_a_records_file_shorter_than_its_index_is_one_error_naming_it(tmp_path):
    from stages.ingest.dedup.components import EDGE_RECORD

    path = tmp_path / "edges.bin"
    np.zeros(3, EDGE_RECORD).tofile(path)
    with open(path, "rb") as f:
        got = files.read_records(f, EDGE_RECORD, 5, 2, path)
        assert [len(r) for r in (next(got), next(got))] == [2, 1]
        with pytest.raises(ValueError, match=f"{path} is shorter than its index says: rerun the step that wrote it"):
            next(got)
