"""The export refuses what it cannot convert faithfully, with one line naming the key or file, and leaves
no folder behind: unknown keys, missing keys, the wrong flavor or vocabulary, damaged checkpoints."""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402

from tests.europa_model.hf.hf_checkpoints import build_unit_scale_model, save_checkpoint  # noqa: E402

VOCAB = 500


@pytest.fixture(scope="module")
def model():
    return build_unit_scale_model("tiny", VOCAB, seed=1)


def _export(ck, out, **kw):
    from europa_model.hf import export_checkpoint

    return export_checkpoint(ck, kw.pop("flavor", "tiny"), kw.pop("vocab_size", VOCAB), out, **kw)


def _nothing_left(out):
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def test_unknown_model_key_is_named(tmp_path, model):
    from europa_model.hf import ExportPlanError

    ck = save_checkpoint(model, tmp_path / "ck", extra={"layers.1.moe.router.temperature": torch.ones(8)})
    with pytest.raises(ExportPlanError, match=r"'layers\.1\.moe\.router\.temperature' is not part of this model"):
        _export(ck, tmp_path / "out")
    _nothing_left(tmp_path / "out")


def test_unknown_non_tensor_entry_is_named(tmp_path, model):
    from europa_model.hf import ExportPlanError

    ck = save_checkpoint(model, tmp_path / "ck", extra={"ema": {"decay": 0.999}})
    with pytest.raises(ExportPlanError, match=r"'ema\.decay' is not part of this model"):
        _export(ck, tmp_path / "out")


def test_missing_tensor_is_named(tmp_path, model):
    from europa_model.hf import ExportPlanError

    class Without(torch.nn.Module):  # the model's state minus one tensor, saved the same way
        def state_dict(self):
            sd = dict(model.state_dict())
            del sd["layers.2.moe.expert_bias_E"]
            return sd

        def named_parameters(self):
            return model.named_parameters()

    ck = save_checkpoint(Without(), tmp_path / "ck")
    with pytest.raises(ExportPlanError, match=r"lacks model tensor 'layers\.2\.moe\.expert_bias_E'"):
        _export(ck, tmp_path / "out")


def test_wrong_vocabulary_names_the_tensor(tmp_path, model):
    from europa_model.hf import ExportPlanError

    ck = save_checkpoint(model, tmp_path / "ck")
    with pytest.raises(ExportPlanError, match=r"'tok_embeddings\.weight' has shape \(500, 64\).*\(512, 64\)"):
        _export(ck, tmp_path / "out", vocab_size=512)
    with pytest.raises(ValueError, match="unknown EUROPA flavor 'huge'"):
        _export(ck, tmp_path / "out", flavor="huge")


def test_truncated_data_file_names_the_tensor_and_leaves_nothing(tmp_path, model):
    from europa_model.hf import CheckpointError

    ck = save_checkpoint(model, tmp_path / "ck", training_state=False)
    (data,) = ck.glob("*.distcp")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"tensor '[^']+' cannot be read from __0_0\.distcp .*damaged or incomplete"):
        _export(ck, tmp_path / "out", max_shard_bytes=200_000)
    _nothing_left(tmp_path / "out")


def test_unfinished_or_garbled_metadata(tmp_path, model):
    from europa_model.hf import CheckpointError

    ck = save_checkpoint(model, tmp_path / "ck", training_state=False)
    meta = ck / ".metadata"
    raw = meta.read_bytes()
    meta.write_bytes(raw[:100])
    with pytest.raises(CheckpointError, match=r"unreadable \.metadata"):
        _export(ck, tmp_path / "out")
    meta.unlink()
    with pytest.raises(CheckpointError, match=r"no \.metadata, so the save did not finish"):
        _export(ck, tmp_path / "out")
    with pytest.raises(CheckpointError, match="no such folder"):
        _export(tmp_path / "absent", tmp_path / "out")


def test_existing_output_is_kept_unless_overwrite(tmp_path, model):
    from europa_model.hf import ExportError

    ck = save_checkpoint(model, tmp_path / "ck", training_state=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="already exists"):
        _export(ck, out)
    assert (out / "keep.txt").read_text() == "mine"
    res = _export(ck, out, overwrite=True, dtype="fp32")
    assert not (out / "keep.txt").exists() and (out / "config.json").is_file() and res.tensors == 91
    with pytest.raises(ExportError, match="dtype 'int8'"):
        _export(ck, tmp_path / "other", dtype="int8")


def test_wrong_tokenizer_is_refused(tmp_path, model):
    from europa_model.hf import ExportError

    ck = save_checkpoint(model, tmp_path / "ck", training_state=False)
    tok = tmp_path / "tok"
    tok.mkdir()
    with pytest.raises(ExportError, match=r"no tokenizer\.json"):
        _export(ck, tmp_path / "out", tokenizer_dir=tok)
