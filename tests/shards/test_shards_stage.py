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
from europa_model.data.format import ShardError, token_dtype
from europa_model.data.packing import PackedSequences
from europa_model.data.streams import LanguageStream, MixtureStream, open_shards
from tests.conftest import udhr_source, write_config

LANGS = '["de", "el", "ga", "mt", "bg", "fi"]'
BODY = """
[tokenizer]
vocab_size = 1500
reserved_tokens = 2
[shards]
val_fraction = 0.1
max_shard_tokens = 2048
[shards.mixture]
max_epochs = 2
total_tokens = 100000
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory, udhr_dir):
    tmp = tmp_path_factory.mktemp("shards")
    cfg = write_config(tmp, udhr_source(udhr_dir) + BODY, languages=LANGS)
    run_dir = tmp / "run"
    assert main(["run", "--config", str(cfg), "--run-dir", str(run_dir), "--to", "shards"]) == 0
    return run_dir


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


def test_corrupt_and_truncated_shards_are_named(run, tmp_path):
    copy = tmp_path / "shards"
    shutil.copytree(run / "shards", copy)
    victim = copy / "train" / "mt" / "shard-00000.bin"
    data = bytearray(victim.read_bytes())
    data[10] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=r"train/mt/shard-00000.bin does not match its checksum"):
        open_shards(copy, "train")
    victim.write_bytes(bytes(data[:-4]))
    with pytest.raises(ShardError, match=r"train/mt/shard-00000.bin is truncated"):
        open_shards(copy, "train")


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
