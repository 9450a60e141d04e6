"""Shards and the dataloader on the real UDHR corpus: round trip, checksums, split, mixture, ranks, resume."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import sentencepiece as spm

from pipeline.cli import main
from pipeline.fsutil import sha256_file
from europa_model.data.format import ShardError, token_dtype
from europa_model.data.packing import PackedSequences
from europa_model.data.streams import LanguageStream, MixtureStream, open_shards
from tests.runs import LANGS

def ingest_texts(run_dir: Path, lang: str) -> dict[str, str]:
    rows = {}
    for p in sorted((run_dir / "ingest" / "data" / lang).glob("*.parquet")):
        rows.update({r["id"]: r["text"] for r in pq.read_table(p).to_pylist()})
    return rows


def test_round_trip_split_and_manifest(run):
    sp = spm.SentencePieceProcessor(model_file=str(run / "tokenizer" / "tokenizer.model"))
    m = json.loads((run / "shards" / "manifest.json").read_text())
    index = json.loads((run / "shards" / "index.json").read_text())
    assert index["dtype"] == "<u2" and index["eos_id"] == 2
    for lang in json.loads(LANGS):
        texts = ingest_texts(run, lang)
        seen = {}
        for split in ("train", "val"):
            _, by_lang = open_shards(run / "shards", split, [lang])
            for shard in by_lang[lang]:
                for i, doc_id in enumerate(shard.ids()):
                    tokens = shard.doc(i)
                    assert tokens[-1] == index["eos_id"]
                    assert sp.decode(tokens[:-1].tolist()) == texts[doc_id]
                    assert doc_id not in seen  # no document in both splits, or twice
                    seen[doc_id] = split
        assert set(seen) == set(texts)
        n_val = sum(1 for s in seen.values() if s == "val")
        assert n_val == max(1, round(0.1 * len(texts)))
        st = m["statistics"]["per_language"][lang]
        assert st["val_docs"] == n_val and st["train_docs"] == len(texts) - n_val
        assert st["train_shards"] >= 2  # bounded shards: 2048 tokens each at most (plus one document)
    bins = [o for o in m["outputs"] if o["path"].endswith(".bin")]
    assert bins and all(o["tokens"] > 0 for o in bins)


def test_mixture_respects_the_epoch_cap(run):
    mixture = json.loads((run / "shards" / "mixture.json").read_text())
    langs = mixture["languages"]
    assert all(v["expected_epochs"] <= 2.0 + 1e-6 for v in langs.values())
    assert abs(sum(v["weight"] for v in langs.values()) - 1.0) < 1e-6
    assert "unallocated" in mixture["note"]  # 100k planned tokens > 2 epochs of this tiny corpus


def test_a_damaged_shard_is_named_when_training_reads_it(run, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(run / "shards", copy)
    _, by_lang = open_shards(copy, "train", ["mt"])  # lazy: nothing is opened, so nothing fails yet
    victim = by_lang["mt"][0]
    last = len(victim) - 1
    assert victim.doc(0)[-1] == 2  # opened now
    bin_path = copy / "train" / "mt" / "shard-00000.bin"
    with open(bin_path, "r+b") as f:  # the file shrinks while a training job has it open
        f.truncate(bin_path.stat().st_size - 4)
    with pytest.raises(ShardError, match=rf"train/mt/shard-00000.bin: document {last} .* is cut off"):
        victim.doc(last)
    victim.close()
    with pytest.raises(ShardError, match=r"train/mt/shard-00000.bin is truncated"):
        victim.doc(0)  # reopening checks the sizes first
    shutil.copy(run / "shards" / "train" / "mt" / "shard-00000.bin", bin_path)
    idx_path = copy / "train" / "mt" / "shard-00000.idx"
    offsets = np.fromfile(idx_path, dtype="<i8")
    offsets[1] = offsets[-1] + 7
    offsets.tofile(idx_path)
    _, by_lang = open_shards(copy, "train", ["mt"])
    with pytest.raises(ShardError, match=r"train/mt/shard-00000.idx: document 0 has offsets .* \(the index is corrupt\)"):
        by_lang["mt"][0].doc(0)


def test_the_manifest_publishes_the_checksums_computed_while_writing(run, tmp_path, monkeypatch):
    import pipeline.manifest

    copy = tmp_path / "run"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))
    hashed = []
    real = pipeline.manifest.sha256_files
    monkeypatch.setattr(pipeline.manifest, "sha256_files", lambda paths: hashed.extend(paths) or real(paths))
    assert main(["stage", "shards", "--force", "--run-dir", str(copy)]) == 0
    assert hashed == []  # no output file of the stage was read back to checksum it
    manifest = json.loads((copy / "shards" / "manifest.json").read_text())
    index = json.loads((copy / "shards" / "index.json").read_text())
    published = {o["path"]: o["sha256"] for o in manifest["outputs"]}
    for shard in index["shards"]:
        for ext in ("bin", "idx", "ids"):
            assert published[f"{shard['path']}.{ext}"] == shard[f"sha256_{ext}"] == sha256_file(copy / "shards" / f"{shard['path']}.{ext}")


def test_units_group_ingest_files_to_fill_a_shard(run):
    from stages.shards.stage import group_files

    files = [Path(f"part-{i}") for i in range(6)]
    groups = group_files(files, [1000, 1000, 3000, 5000, 10, 10], 4000)
    assert [[f.name for f in g] for g in groups] == [["part-0", "part-1"], ["part-2"], ["part-3"], ["part-4", "part-5"]]
    work = json.loads((run / "shards" / "manifest.json").read_text())["statistics"]
    ingest_files = {lang: len(list((run / "ingest" / "data" / lang).glob("*.parquet"))) for lang in json.loads(LANGS)}
    assert all(n >= 3 for n in ingest_files.values())  # several ingest files per language (max_rows_per_file)
    for lang, st in work["per_language"].items():
        assert st["val_shards"] < ingest_files[lang]  # one validation shard per unit: files were grouped


def test_ranks_see_disjoint_documents_that_cover_the_language(run):
    _, by_lang = open_shards(run / "shards", "train", ["de"])
    shards = by_lang["de"]
    total = sum(len(s) for s in shards)
    seen = []
    for rank in range(2):
        stream = LanguageStream(shards, seed=5, lang_key=0, rank=rank, world=2)
        per_epoch = sum(len(range(rank, len(s), 2)) for s in shards)
        docs = [stream.next_doc().tobytes() for _ in range(per_epoch)]
        assert len(set(docs)) == per_epoch and stream.epoch == 0
        seen.append(set(docs))
    assert not seen[0] & seen[1]
    assert len(seen[0]) + len(seen[1]) == total


def _rows(packer, n):
    return [tuple(a.copy() for a in packer.next_row()) for _ in range(n)]


def test_packing_resumes_exactly_and_masks_documents(run):
    index, by_lang = open_shards(run / "shards", "train")
    weights = {k: v["weight"] for k, v in json.loads((run / "shards" / "mixture.json").read_text())["languages"].items()}
    make = lambda: PackedSequences(MixtureStream(by_lang, weights, seed=3, rank=0, world=1), seq_len=96, bos_id=index["bos_id"])  # noqa: E731
    a = make()
    head = _rows(a, 37)
    state = json.loads(json.dumps(a.state_dict()))  # the state survives serialization
    tail = _rows(a, 25)
    b = make()
    b.load_state_dict(state)
    assert all((x == y).all() for r1, r2 in zip(tail, _rows(b, 25)) for x, y in zip(r1, r2))
    # positions restart at 0 where a document begins (BOS), and the label before a new document is EOS
    for inputs, labels, positions in head:
        starts = np.flatnonzero(inputs == index["bos_id"])
        assert (positions[starts] == 0).all()
        assert (labels[starts[starts > 0] - 1] == index["eos_id"]).all()
        assert (np.diff(positions)[positions[1:] != 0] == 1).all()  # elsewhere positions count up


def test_torchtitan_dataloader_state_round_trip(run):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    from europa_model.data.loader import EuropaShardsDataLoader

    cfg = EuropaShardsDataLoader.Config(dataset_path=str(run / "shards"), seed=11)
    build = lambda rank=0, world=1: cfg.build(dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=64, local_batch_size=3)  # noqa: E731
    dl = build()
    it = iter(dl)
    for _ in range(4):
        next(it)
    state = dl.state_dict()
    expected = [next(it) for _ in range(3)]
    again = build()
    again.load_state_dict(state)
    got = [b for _, b in zip(range(3), again)]
    for (x_in, x_lab), (y_in, y_lab) in zip(expected, got):
        assert x_in["input"].shape == (3, 64)
        assert torch.equal(x_in["input"], y_in["input"]) and torch.equal(x_lab, y_lab) and torch.equal(x_in["positions"], y_in["positions"])
    r0, r1 = next(iter(build(0, 2))), next(iter(build(1, 2)))
    assert not torch.equal(r0[0]["input"], r1[0]["input"])


def test_rerun_skips_and_dtype_choice(run, capsys):
    assert main(["stage", "shards", "--run-dir", str(run)]) == 0
    assert "fresh, nothing to do" in capsys.readouterr().out
    assert token_dtype(65536) == np.dtype("<u2") and token_dtype(65537) == np.dtype("<u4")


def test_global_order_gives_the_same_global_batches_at_any_rank_count(run):
    import torch

    from europa_model.data.loader import EuropaShardsDataLoader

    def batches(world, rank, local, order="global", n=3):
        cfg = EuropaShardsDataLoader.Config(dataset_path=str(run / "shards"), seed=11, order=order)
        dl = cfg.build(dp_world_size=world, dp_rank=rank, tokenizer=None, seq_len=64, local_batch_size=local)
        return [b for _, b in zip(range(n), dl)]

    one = batches(1, 0, 6)
    two = [batches(2, r, 3) for r in (0, 1)]
    for step in range(3):
        joined = torch.cat([two[0][step][0]["input"], two[1][step][0]["input"]])
        assert torch.equal(one[step][0]["input"], joined)
        assert torch.equal(one[step][1], torch.cat([two[0][step][1], two[1][step][1]]))
    per_rank = [batches(2, r, 3, order="per_rank", n=1) for r in (0, 1)]
    assert not torch.equal(per_rank[0][0][0]["input"], per_rank[1][0][0]["input"])  # disjoint documents per rank
