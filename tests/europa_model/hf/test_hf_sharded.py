"""A checkpoint saved the way FSDP saves it (each rank its own file, every tensor in 2 chunks) exports to the
same bytes as a single-process save of the same weights: the reader reassembles chunks, it does not assume
one chunk per tensor (europa-1t's checkpoints come from hundreds of ranks). Both saves are read by the
direct reader (raw bytes into the output buffer), which must give exactly what DCP's own load gives."""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

from torch.distributed.checkpoint import FileSystemReader  # noqa: E402

from tests.europa_model.hf.hf_checkpoints import build_unit_scale_model, save_checkpoint, save_sharded_checkpoint  # noqa: E402


def test_two_rank_checkpoint_exports_the_same_bytes(tmp_path):
    from europa_model.hf import export_checkpoint

    model = build_unit_scale_model("tiny", 500, seed=2)
    one = save_checkpoint(model, tmp_path / "one", training_state=False)
    two = save_sharded_checkpoint(model, tmp_path / "two", world_size=2)
    md = FileSystemReader(str(two)).read_metadata()
    assert len(md.state_dict_metadata["layers.1.moe.routed_experts.inner_experts.w1_EFD"].chunks) == 2
    assert len(list(two.glob("*.distcp"))) == 2
    for dtype in ("fp32", "bf16"):
        a = export_checkpoint(one, "tiny", 500, tmp_path / f"from-one-{dtype}", dtype=dtype, max_shard_bytes=500_000)
        b = export_checkpoint(two, "tiny", 500, tmp_path / f"from-two-{dtype}", dtype=dtype, max_shard_bytes=500_000)
        assert a.shards == b.shards and len(a.shards) > 1
        for name in [*a.shards, "model.safetensors.index.json", "config.json"]:
            assert a.sha256[name] == b.sha256[name], name


def test_direct_reads_equal_dcp_loads(tmp_path):
    import torch

    from europa_model.hf.dcp_reader import DCPCheckpoint

    model = build_unit_scale_model("tiny", 500, seed=3)
    saved = {"one": save_checkpoint(model, tmp_path / "one"),  # with optimizer state, as training saves
             "two": save_sharded_checkpoint(model, tmp_path / "two", world_size=2)}
    for layout, path in saved.items():
        ck = DCPCheckpoint(path)
        keys = [k for k in ck.tensors if not k.startswith("optimizer.")]
        assert len(keys) >= 49
        for key in keys:
            shape, _ = ck.tensors[key]
            for dtype in (torch.float32, torch.bfloat16):
                direct = ck._read_direct(key, shape, dtype)
                assert direct is not None, f"{layout}: {key} fell back to DCP's reader"
                assert torch.equal(direct, ck._read_dcp(key, shape, dtype)), (layout, key, dtype)
