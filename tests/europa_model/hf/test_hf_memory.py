"""The export streams: its peak memory follows the largest tensor, not the model. A ~330 MB checkpoint
whose largest tensor (one layer's grouped expert weight) is 48 MB, saved from one process, must export
within what one tensor at a time costs: the output buffer the stored bytes are read into (fp32 1x the
tensor; bf16 0.5x plus the 16 MB slab it is cast through) and a fixed 16 MB (measured ~7: the plan,
bookkeeping), in a fresh process; far below what loading the model would take. Figures for a larger model
and for sharded saves: bench/export_memory_bench.py."""

from __future__ import annotations

import gc
import os
from pathlib import Path

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402

from tests.europa_model.hf.hf_checkpoints import build_unit_scale_model, registered_flavor, save_checkpoint  # noqa: E402
from tests.europa_model.hf.hf_memory import export_peak  # noqa: E402

MB = 1 << 20


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc to reset the RSS peak")
def test_peak_memory_follows_the_largest_tensor(tmp_path):
    from europa_model.flavors import Flavor

    flavor = Flavor(default_vocab_size=8192, dim=384, n_layers=3, n_dense_layers=1, n_heads=6, q_lora_rank=192,
                    kv_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32, dense_hidden_dim=1024,
                    moe_hidden_dim=512, num_experts=64, num_shared_experts=1, top_k=4, route_scale=1.0,
                    max_seq_len=1024)
    with registered_flavor("test-export-memory", flavor):
        model = build_unit_scale_model("test-export-memory", None)
        sizes = [t.numel() * 4 for t in model.state_dict().values()]
        ck = save_checkpoint(model, tmp_path / "ck", training_state=False)
        del model
        gc.collect()
        largest, total = max(sizes), sum(sizes)
        assert largest == 64 * 512 * 384 * 4 and total > 6 * largest
        from europa_model.hf.dcp_reader import SLAB_BYTES

        for dtype, ratio, slab in (("bf16", 0.5, SLAB_BYTES), ("fp32", 1.0, 0)):
            r = export_peak(ck, tmp_path / dtype, dtype, "test-export-memory", flavor, max_shard_bytes=50 * MB)
            beyond = r["peak"] - r["baseline"]
            print(f"{dtype}: peak beyond baseline {beyond / MB:.0f} MB = {beyond / largest:.2f}x the largest tensor "
                  f"({largest / MB:.0f} MB; checkpoint {total / MB:.0f} MB)")
            assert r["total_bytes"] > 0 and beyond < ratio * largest + slab + 16 * MB
