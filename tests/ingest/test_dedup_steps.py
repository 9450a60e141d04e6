"""The dedup steps (stages/ingest/dedup/) against the single-process dedup (dedup_reference.py), on real Parquet
files.

Equality: the same kept rows, the same dropped ids, reasons and duplicate_of as `dedup_in_memory`, on
generated languages of several units with exact copies, near copies split over units, chains A~B~C, exact
copies of near duplicates and empty-signature documents. Also: the order units and partitions run in and the
number of partitions change no output byte; a step reads only its partition; a step killed with os._exit
leaves no output folder and its rerun gives the uninterrupted output.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.rundir import RunDir
from pipeline.runconfig import resolve
from pipeline.stage import StageContext
from stages.ingest.config import IngestConfig
from stages.ingest.dedup import files, keys
from stages.ingest.dedup.buckets import find_candidate_pairs
from stages.ingest.dedup.clusters import connected_components, greedy_first_kept, resolve_clusters
from stages.ingest.dedup.exact import find_exact_duplicates
from stages.ingest.dedup.filter import filter_unit
from stages.ingest.dedup.signatures import write_signatures
from stages.ingest.minhash import DedupConfig, NearDuplicateIndex, exact_key, minhash_signatures
from stages.ingest.process import add_dedup_keys
from stages.ingest.reasons import EXACT_DUP, NEAR_DUP
from stages.ingest.schema import DOCUMENT_SCHEMA, REJECTED_SCHEMA, UNIT_KEPT_SCHEMA, to_table
from stages.ingest.units import FilterStats, SignatureStats
from tests.conftest import write_config
from tests.ingest.dedup_local import LocalDedup, dedup_language, layout, once
from tests.ingest.dedup_reference import dedup_in_memory

REPO = Path(__file__).resolve().parents[2]
LANG = "de"
VOCAB = [f"w{i}" for i in range(20_000)]
WEIGHTS = [1.0 / (i + 1) for i in range(len(VOCAB))]


# --- generated languages -----------------------------------------------------------------------------
def _doc(rng: random.Random, n_words: int = 120) -> str:
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=n_words))


def _edit(doc: str, rng: random.Random, fraction: float) -> str:
    """Replace a contiguous span (an edited sentence)."""
    words = doc.split()
    k = max(1, int(len(words) * fraction))
    start = rng.randrange(0, len(words) - k)
    words[start : start + k] = [f"edit{rng.randrange(10**9)}" for _ in range(k)]
    return " ".join(words)


def language(seed: int = 0, n_units: int = 4, n_originals: int = 80) -> list[list[str]]:
    """Texts per unit (unit order = list order) with every kind of duplicate planted, some across units."""
    rng = random.Random(seed)
    originals = [_doc(rng) for _ in range(n_originals)]
    planted: list[str] = []
    for d in originals[:10]:  # exact copies, differing in case and whitespace only
        planted.append("  " + d.upper().replace(" ", "\n", 3))
    for d in originals[10:30]:  # near copies
        planted.append(_edit(d, rng, 0.06))
    for d in originals[30:45]:  # chains A ~ B ~ C with A !~ C for some of them
        b = _edit(d, rng, 0.07)
        c = _edit(b, rng, 0.07)
        planted += [b, c, c + " coda"]
    for d in originals[45:50]:  # an exact copy of a near duplicate: exact_duplicate of a dropped document
        near = _edit(d, rng, 0.05)
        planted += [near, near.lower()]
    for d in originals[50:55]:  # triangles A ~ B ~ C ~ A
        planted += [_edit(d, rng, 0.03), _edit(d, rng, 0.03)]
    planted += ["— … —", "… — …", "— … —"]  # empty signatures: exact dedup only
    docs = originals + planted
    rng.shuffle(docs)
    units = [docs[i::n_units] for i in range(n_units)]
    units.insert(1, [])  # a unit whose documents were all filtered out
    return units


def unit_rows(texts: list[str], uid: str, settings: IngestConfig) -> list[dict]:
    rows = [{"id": hashlib.sha1(f"{uid}/{i}".encode()).hexdigest()[:20], "text": t, "lang": LANG, "source": "web",
             "input": f"{uid}.jsonl", "input_index": i, "mojibake_fixed": False, "pii_redactions": 0,
             "n_chars": len(t), "n_bytes": len(t.encode()), "n_words": len(t.split()), "lang_detected": LANG,
             "lang_score": 0.99, "domain": "example.de", "licence": "CC-BY-4.0", "collected": "2025-01"}
            for i, t in enumerate(texts)]
    add_dedup_keys(rows, settings)
    return rows


def write_units(tmp: Path, units: list[list[str]], dedup_toml: str = "") -> tuple[StageContext[IngestConfig], list[Path]]:
    """The units' kept.parquet files as the documents step leaves them (rows + dedup keys), in unit order."""
    body = textwrap.dedent(f"""
    [[ingest.sources]]
    name = "web"
    kind = "jsonl"
    path = "{tmp}/none/*.jsonl"
    licence = "CC-BY-4.0"
    collected = "2025-01"
    [ingest.dedup]
    """) + dedup_toml
    rd, config = resolve(str(write_config(tmp, body, languages=f'["{LANG}"]')), str(tmp / "run"))
    ctx: StageContext[IngestConfig] = StageContext(RunDir(tmp / "run"), config, "ingest", "test", {})
    settings = ctx.settings
    kept = []
    for r, texts in enumerate(units):
        uid = f"{LANG}-web-{r:05d}"
        folder = ctx.unit_dir("documents", uid)
        folder.mkdir(parents=True)
        pq.write_table(to_table(unit_rows(texts, uid, settings), UNIT_KEPT_SCHEMA), folder / "kept.parquet")
        kept.append(folder / "kept.parquet")
    return ctx, kept


def today(ctx: StageContext[IngestConfig], kept: list[Path]) -> tuple[pa.Table, pa.Table]:
    """(kept rows, duplicate rows) of the single-process dedup over the units in order."""
    return dedup_in_memory(pa.concat_tables(pq.read_table(k) for k in kept), ctx.settings.dedup)


def steps(kept: list[Path], work: Path, cfg: DedupConfig, partitions: int, **kw) -> tuple[pa.Table, pa.Table, LocalDedup]:
    out = dedup_language(kept, work, cfg, partitions, **kw)
    filtered = out.folders.filtered
    return (pa.concat_tables(files.read_parts(d, files.KEPT_PARTS, DOCUMENT_SCHEMA) for d in filtered),
            pa.concat_tables(files.read_parts(d, files.DUPLICATE_PARTS, REJECTED_SCHEMA) for d in filtered), out)


def decisions(dups: pa.Table) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["reason"], r["duplicate_of"]) for r in dups.select(["id", "reason", "duplicate_of"]).to_pylist()}


def tree_digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    ctx, kept = write_units(tmp, language())
    ref_kept, ref_dups = today(ctx, kept)
    return ctx, kept, ref_kept, ref_dups


# --- equality with the single-process dedup -------------------------------------------------------
@pytest.mark.parametrize("partitions", [1, 3, 8])
def test_same_rows_and_decisions_as_the_single_process_dedup(planted, tmp_path, partitions):
    ctx, kept, ref_kept, ref_dups = planted
    got_kept, got_dups, out = steps(kept, tmp_path, ctx.settings.dedup, partitions)
    assert got_kept.equals(ref_kept)  # the same kept rows, in the same order, every column
    assert got_dups.equals(ref_dups)  # the same duplicates, reasons, duplicate_of, in the same order
    reasons = [r for r, _ in decisions(ref_dups).values()]
    assert reasons.count(EXACT_DUP) >= 12 and reasons.count(NEAR_DUP) >= 30  # the planted kinds are there
    assert sum(s.exact_duplicate + s.near_duplicate for s in out.stats.filter.values()) == ref_dups.num_rows
    clusters = out.stats.clusters
    assert clusters is not None and clusters.pairs_read == clusters.pairs > 0  # each pair emitted by one band of one partition only


def test_duplicate_pair_split_over_units_is_found(planted, tmp_path):
    ctx, kept, ref_kept, ref_dups = planted
    unit_of = {}
    for r, path in enumerate(kept):
        unit_of.update({i: r for i in pq.read_table(path, columns=["id"]).column("id").to_pylist()})
    _, got_dups, out = steps(kept, tmp_path, ctx.settings.dedup, 3)
    got = decisions(got_dups)
    for reason in (EXACT_DUP, NEAR_DUP):
        cross = {d: v for d, v in decisions(ref_dups).items() if v[0] == reason and unit_of[d] != unit_of[v[1]]}
        assert len(cross) >= 5 and all(got[d] == v for d, v in cross.items())
        # and the unit holding the duplicate counted it, not the unit of its representative
        for d in cross:
            f = out.stats.filter[unit_of[d]]
            assert {EXACT_DUP: f.exact_duplicate, NEAR_DUP: f.near_duplicate}[reason] >= 1


def test_chains_follow_todays_greedy_rule_not_components(planted, tmp_path):
    """A~B~C with A !~ C: the greedy rule drops B for A and keeps C; connected components would drop C too."""
    ctx, kept, ref_kept, ref_dups = planted
    cfg = ctx.settings.dedup
    _, comp_dups, out = steps(kept, tmp_path / "components", cfg, 4, rule="components")
    greedy = decisions(ref_dups)
    comp = decisions(comp_dups)
    extra = set(comp) - set(greedy)
    assert extra and set(greedy) <= set(comp)  # the corpus has such chains; components only ever drop more
    assert out.stats.clusters is not None and len(extra) == out.stats.clusters.kept_by_greedy_not_by_components
    sig_of = {}
    for path in kept:
        t = pq.read_table(path, columns=["id", "signature"]).to_pylist()
        sig_of.update({r["id"]: np.frombuffer(r["signature"], np.uint32) for r in t})
    min_agree = int(np.ceil(cfg.threshold * cfg.num_perm - 1e-9))
    kept_ids = set(ref_kept.column("id").to_pylist())
    for doc in extra:  # kept by the greedy rule: its component's first document is no verified LSH candidate of it
        rep = comp[doc][1]
        assert doc in kept_ids and rep in kept_ids
        pair = np.stack([sig_of[rep], sig_of[doc]])
        shares_band = (keys.band_keys(pair, cfg)[0] == keys.band_keys(pair, cfg)[1]).any()
        assert not (shares_band and np.count_nonzero(pair[0] == pair[1]) >= min_agree)


@pytest.mark.parametrize("dedup_toml", ["exact = false\n", "near = false\n", "num_perm = 64\nbands = 8\nrows = 8\nthreshold = 0.6\n"])
def test_other_settings_match_the_single_process_dedup_too(tmp_path, dedup_toml):
    ctx, kept = write_units(tmp_path, language(seed=3, n_units=3, n_originals=60), dedup_toml)
    ref_kept, ref_dups = today(ctx, kept)
    got_kept, got_dups, _ = steps(kept, tmp_path / "steps", ctx.settings.dedup, 5)
    assert got_kept.equals(ref_kept) and got_dups.equals(ref_dups)
    assert ref_dups.num_rows > 0


# --- determinism ----------------------------------------------------------------------------------
def test_order_of_units_and_partitions_and_partition_count_change_nothing(planted, tmp_path):
    ctx, kept, _, _ = planted
    cfg = ctx.settings.dedup

    def shuffled(seed):
        rng = random.Random(seed)
        return lambda xs: rng.sample(xs, len(xs))

    a = dedup_language(kept, tmp_path / "a", cfg, 6).folders
    b = dedup_language(kept, tmp_path / "b", cfg, 6, order=shuffled(1)).folders
    c = dedup_language(kept, tmp_path / "c", cfg, 2, order=shuffled(2)).folders
    assert tree_digest(tmp_path / "a") == tree_digest(tmp_path / "b")  # every file of every step, byte for byte
    for fa, fc in zip(a.filtered, c.filtered):  # the decisions do not depend on the partition count
        assert tree_digest(fa) == {**tree_digest(fc), "stats.json": tree_digest(fa)["stats.json"]}
        assert json.loads((fa / "stats.json").read_text())["kept"] == json.loads((fc / "stats.json").read_text())["kept"]


# --- pieces ---------------------------------------------------------------------------------------
def test_keys_are_todays_keys():
    cfg = DedupConfig()
    assert np.array_equal(keys.band_multipliers(cfg.rows, cfg.seed), NearDuplicateIndex(cfg)._band_mult)
    sigs = minhash_signatures([_doc(random.Random(i)) for i in range(5)], cfg)
    expected = (sigs.reshape(5, cfg.bands, cfg.rows).astype(np.uint64) * NearDuplicateIndex(cfg)._band_mult).sum(axis=2)
    assert np.array_equal(keys.band_keys(sigs, cfg), expected)
    hexes = [exact_key(t) for t in ["a", "b c", ""]]
    hi, lo = keys.exact_words(hexes)
    assert [(int(h) << 64) | int(l) for h, l in zip(hi, lo)] == [int(h, 16) for h in hexes]
    order = keys.order_keys(7, np.array([0, 5, 2**32 - 1]))
    assert keys.unit_rank(order).tolist() == [7] * 3 and keys.ordinal(order).tolist() == [0, 5, 2**32 - 1]


def _greedy_reference(edges: list[tuple[int, int]], n: int) -> list[int]:
    """NearDuplicateIndex's rule written as a loop over documents: first kept earlier neighbour wins."""
    earlier = {i: sorted(a for a, b in edges if b == i) for i in range(n)}
    dup = [-1] * n
    for i in range(n):
        dup[i] = next((c for c in earlier[i] if dup[c] == -1), -1)
    return dup


@pytest.mark.parametrize("seed", range(6))
def test_greedy_rounds_and_components_on_random_graphs(seed):
    rng = random.Random(seed)
    n = 60
    edges = sorted({tuple(sorted(rng.sample(range(n), 2))) for _ in range(rng.choice([20, 60, 150]))})
    edges += [(i, i + 1) for i in range(40, 55)]  # a long chain: many rounds
    lo, hi = (np.array(x, dtype=np.int64) for x in zip(*edges))
    dup, rounds = greedy_first_kept(lo, hi, n)
    assert dup.tolist() == _greedy_reference(edges, n) and rounds >= 1
    parent = list(range(n))

    def find(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        parent[max(ra, rb)] = min(ra, rb)
    assert connected_components(lo, hi, n).tolist() == [min(j for j in range(n) if find(j) == find(i)) for i in range(n)]


# --- bounded memory -------------------------------------------------------------------------------
def synthetic_kept(path: Path, n: int, seed: int, near_every: int = 50) -> None:
    """Only what steps 1-3 read (id, signature, exact_key): random signatures with planted near copies."""
    rng = np.random.default_rng(seed)
    sigs = rng.integers(0, 2**32 - 1, size=(n, 128), dtype=np.uint32)
    copies = np.arange(near_every, n, near_every)
    sigs[copies] = sigs[copies - 1]  # each copy follows its original
    sigs[copies, :20] += 1  # 108 / 128 agree, 13 of 16 bands equal: verified near duplicates
    ids = [f"{seed}-{i}" for i in range(n)]
    pq.write_table(pa.table({"id": ids, "signature": [s.tobytes() for s in sigs],
                             "exact_key": [hashlib.blake2b(i.encode(), digest_size=16).hexdigest() for i in ids]}), path)


def _peak(fn, *args, **kw) -> int:
    tracemalloc.start()
    try:
        fn(*args, **kw)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_pair_step_reads_only_its_partition(tmp_path):
    cfg = DedupConfig()
    kept = []
    for r in range(3):
        kept.append(tmp_path / f"k{r}.parquet")
        synthetic_kept(kept[-1], 6000, r)
    peaks, rows = {}, {}
    for partitions in (1, 8):
        where = layout(tmp_path / f"P{partitions}", len(kept), partitions)
        for r, path in enumerate(kept):
            write_signatures(path, where.signatures[r], cfg, partitions)
        peaks[partitions] = _peak(find_candidate_pairs, where.signatures, 0, where.pairs[0], cfg, partitions)
        rows[partitions] = [find_candidate_pairs(where.signatures, p, where.pairs[p], cfg, partitions).rows_read
                            for p in range(partitions)]
    assert rows[1] == [sum(rows[8])] == [3 * 6000 * cfg.bands]  # each band row read by exactly one partition
    assert max(rows[8]) < 0.2 * rows[1][0]
    assert peaks[8] < 0.3 * peaks[1], peaks  # memory follows the partition, not the language


def test_pair_step_holds_the_band_keys_not_the_band_rows(tmp_path):
    """A partition's band rows are 22 bytes on disk, more in memory with every column concatenated; only the keys
    need to be held all at once to find the few rows that share one."""
    cfg = DedupConfig()
    where = layout(tmp_path, 3, 1)
    for r in range(3):
        synthetic_kept(tmp_path / f"k{r}.parquet", 12000, r)
        write_signatures(tmp_path / f"k{r}.parquet", where.signatures[r], cfg, 1)
    band_rows = 3 * 12000 * cfg.bands
    peak = _peak(find_candidate_pairs, where.signatures, 0, where.pairs[0], cfg, 1)
    assert peak < 24 * band_rows, f"{peak / band_rows:.1f} bytes per band row"
    stats = json.loads((where.pairs[0] / "stats.json").read_text())
    assert stats["rows_read"] == band_rows and stats["verified"] == 3 * (12000 // 50 - 1)  # every planted copy


def test_candidate_signatures_are_gathered_through_bounded_windows(tmp_path):
    from stages.ingest.dedup.buckets import _gather_signatures

    cfg = DedupConfig()
    where = layout(tmp_path, 2, 1)
    for r in range(2):
        synthetic_kept(tmp_path / f"k{r}.parquet", 500, r)
        write_signatures(tmp_path / f"k{r}.parquet", where.signatures[r], cfg, 1)
    rng = np.random.default_rng(0)
    ordinals = [np.unique(rng.integers(0, 500, 120)), np.array([0, 1, 2, 497, 498, 499])]
    docs = np.concatenate([keys.order_keys(r, o) for r, o in enumerate(ordinals)])
    expected = np.concatenate([np.load(where.signatures[r] / "signatures.npy")[o] for r, o in enumerate(ordinals)])
    for window in (1, 7, 64, 500, 10_000):  # windows ending inside, at and past a unit's last row
        assert np.array_equal(_gather_signatures(files.key_folders(where.signatures), docs, cfg.num_perm, window_rows=window), expected)


def test_signature_step_memory_does_not_grow_with_the_unit(tmp_path):
    cfg = DedupConfig()
    peaks = {}
    for n in (8000, 32000):
        synthetic_kept(tmp_path / f"{n}.parquet", n, 0)
        peaks[n] = _peak(write_signatures, tmp_path / f"{n}.parquet", tmp_path / f"s{n}", cfg, 4,
                         batch_rows=2000, buffer_rows=64_000)
    assert peaks[32000] < 1.5 * peaks[8000], peaks


def test_cluster_step_memory_follows_pairs_not_documents(tmp_path):
    cfg = DedupConfig()
    peaks = {}
    for extra_units in (0, 6):
        work = tmp_path / f"x{extra_units}"
        kept = [tmp_path / "dups.parquet"]
        synthetic_kept(kept[0], 4000, 0, near_every=4)
        for e in range(extra_units):  # more documents, no more pairs
            kept.append(tmp_path / f"single{e}.parquet")
            synthetic_kept(kept[-1], 4000, 100 + e, near_every=10**9)
        where = layout(work, len(kept), 2)
        for r, path in enumerate(kept):
            write_signatures(path, where.signatures[r], cfg, 2)
        for p in range(2):
            find_candidate_pairs(where.signatures, p, where.pairs[p], cfg, 2)
        peaks[extra_units] = _peak(resolve_clusters, where.signatures, where.pairs, where.clusters, cfg, 2)
        assert json.loads((where.clusters / "stats.json").read_text())["dropped"] == 999  # 4000 // 4 - 1 copies
    assert peaks[6] < 1.3 * peaks[0], peaks


# --- crash safety ---------------------------------------------------------------------------------
KILLER = textwrap.dedent("""
    import json, os, sys
    import pyarrow.parquet as pq
    from stages.ingest.minhash import DedupConfig
    from stages.ingest.units import ClusterStats, ExactStats, FilterStats, PairStats, SignatureStats
    from tests.ingest.dedup_local import layout, once
    step, n_writes, args = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    real, count = pq.ParquetWriter.write_table, [0]
    def dying(self, *a, **k):
        if count[0] == n_writes:
            os._exit(9)  # like SIGKILL: no cleanup, no finally
        count[0] += 1
        return real(self, *a, **k)
    pq.ParquetWriter.write_table = dying
    from stages.ingest.dedup.buckets import find_candidate_pairs
    from stages.ingest.dedup.clusters import resolve_clusters
    from stages.ingest.dedup.exact import find_exact_duplicates
    from stages.ingest.dedup.filter import filter_unit
    from stages.ingest.dedup.signatures import write_signatures
    cfg, P = DedupConfig(), args["partitions"]
    where = layout(args["work"], len(args["kept"]), P)
    if step == "signatures":
        once(where.signatures[0], SignatureStats, lambda d: write_signatures(args["kept"][0], d, cfg, P))
    elif step == "exact":
        once(where.exact[0], ExactStats, lambda d: find_exact_duplicates(where.signatures, 0, d, cfg, P))
    elif step == "pairs":
        once(where.pairs[0], PairStats, lambda d: find_candidate_pairs(where.signatures, 0, d, cfg, P))
    elif step == "clusters":
        once(where.clusters, ClusterStats, lambda d: resolve_clusters(where.signatures, where.pairs, d, cfg, P))
    else:
        once(where.filtered[0], FilterStats,
             lambda d: filter_unit(args["kept"][0], where.signatures[0], 0, where.exact, where.clusters, d, cfg, P))
""")


@pytest.mark.parametrize("step, n_writes", [("signatures", 0), ("exact", 0), ("pairs", 0), ("clusters", 0), ("filter", 1)])
def test_killed_step_leaves_nothing_and_rerun_is_identical(planted, tmp_path, step, n_writes):
    ctx, kept, _, _ = planted
    cfg, P = ctx.settings.dedup, 2
    assert cfg == DedupConfig()
    ref = dedup_language(kept, tmp_path / "ref", cfg, P).folders
    work = tmp_path / "run"
    where = layout(work, len(kept), P)
    # everything the step needs, then the step killed mid-write
    upstream = {"signatures": [], "exact": ["signatures"], "pairs": ["signatures"],
                "clusters": ["signatures", "pairs"], "filter": ["signatures", "exact", "pairs", "clusters"]}[step]
    for r, path in enumerate(kept):
        if "signatures" in upstream or (step == "signatures" and r > 0):
            write_signatures(path, where.signatures[r], cfg, P)
    for p in range(P):
        if "exact" in upstream:
            find_exact_duplicates(where.signatures, p, where.exact[p], cfg, P)
        if "pairs" in upstream:
            find_candidate_pairs(where.signatures, p, where.pairs[p], cfg, P)
    if "clusters" in upstream:
        resolve_clusters(where.signatures, where.pairs, where.clusters, cfg, P)
    args = json.dumps({"kept": [str(k) for k in kept], "work": str(work), "partitions": P})
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, "-c", KILLER, step, str(n_writes), args], env=env, capture_output=True, text=True)
    assert killed.returncode == 9, killed.stderr
    target = {"signatures": where.signatures[0], "exact": where.exact[0], "pairs": where.pairs[0],
              "clusters": where.clusters, "filter": where.filtered[0]}[step]
    assert not target.exists()  # no half-written output under its final name
    assert [p.name.split(".tmp-")[0] for p in target.parent.glob(f".{target.name}.tmp-*")] == [f".{target.name}"]
    got = dedup_language(kept, work, cfg, P).folders  # the rerun redoes only what is missing
    ref_target = {"signatures": ref.signatures[0], "exact": ref.exact[0], "pairs": ref.pairs[0],
                  "clusters": ref.clusters, "filter": ref.filtered[0]}[step]
    assert tree_digest(target) == tree_digest(ref_target)
    assert all(tree_digest(a) == tree_digest(b) for a, b in zip(got.filtered, ref.filtered))


def test_finished_step_is_not_redone(planted, tmp_path):
    ctx, kept, _, _ = planted
    out = tmp_path / "s"

    def step(folder: Path) -> SignatureStats:
        return write_signatures(kept[0], folder, ctx.settings.dedup, 2)

    first = once(out, SignatureStats, step)
    stamp = (out / files.BANDS).stat().st_mtime_ns
    os.utime(kept[0], None)
    assert once(out, SignatureStats, step) == first
    assert (out / files.BANDS).stat().st_mtime_ns == stamp


# --- refusals -------------------------------------------------------------------------------------
def test_mismatched_inputs_are_refused(planted, tmp_path):
    ctx, kept, _, _ = planted
    cfg = ctx.settings.dedup
    folders = dedup_language(kept, tmp_path / "w", cfg, 2).folders
    other = DedupConfig(seed=2)
    with pytest.raises(ValueError, match="dedup settings"):  # band keys of another hash family
        find_candidate_pairs(folders.signatures, 0, tmp_path / "x", other, 2)
    with pytest.raises(ValueError, match="each of the 2 partitions"):  # a partition's pairs missing
        resolve_clusters(folders.signatures, folders.pairs[:1], tmp_path / "y", cfg, 2)
    with pytest.raises(ValueError, match="each of the 2 partitions"):
        filter_unit(kept[0], folders.signatures[0], 0, folders.exact[1:], folders.clusters, tmp_path / "z", cfg, 2)
    with pytest.raises(ValueError, match="not the file step 1 read"):  # rows of another unit: wrong ordinals
        once(tmp_path / "v", FilterStats,
             lambda d: filter_unit(kept[2], folders.signatures[0], 0, folders.exact, folders.clusters, d, cfg, 2))
    assert not (tmp_path / "v").exists()
    with pytest.raises(FileNotFoundError, match="not finished"):
        find_exact_duplicates([tmp_path / "nothing"], 0, tmp_path / "u", cfg, 2)
