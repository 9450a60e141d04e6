"""Facts about the trained model, from the pretrain and tokenizer records.

Why shared: Annex XI 1.1(d)/(e), Annex XII 1(f)/(g)/2(b) and the Model Documentation Form describe the same
model; reading it in one place keeps their figures identical. Parameter counts are shown exactly and with two
significant figures, with the form's size bin (stages/compliance/numbers.py).
"""

from __future__ import annotations

from stages.compliance.facts import Fact, Records, config_key, constant, derive, open_fact, show
from stages.compliance.numbers import parameter_bin, sci, with_sig2

P = "pretrain"
OBJECTIVE_SOURCE = "pipeline code: the pretrain stage trains with the next-token cross-entropy loss (stages/pretrain)"


def total_params(rec: Records) -> Fact:
    return rec.pretrain.model.total_params.fact(with_sig2)


def active_params(rec: Records) -> Fact:
    return rec.pretrain.model.active_params.fact(with_sig2)


def size_bin(rec: Records) -> Fact:
    return derive(parameter_bin, total_params(rec), method="total parameters binned by the form's size ranges", fmt=str)


def active_size_bin(rec: Records) -> Fact:
    """For a MoE the form asks the active parameters in the same bins."""
    return derive(parameter_bin, active_params(rec), method="active parameters binned by the form's size ranges", fmt=str)


def release_date(rec: Records, key: str = "model.release_date") -> Fact:
    """A release or market date, or "not released" when the provider declares the model not released yet."""
    if rec.settings.model.released is False:
        what = "not released" if key == "model.release_date" else "not placed on the Union market"
        return Fact(what, f"{what} (declared: the model has not been released)", (f"run config {config_key('model.released')}",))
    return rec.setting(key, why="unless [compliance.model] released = false")


# The files a user runs the model from: the released Hugging Face export when [compliance.model] release_export
# declares one (stages/compliance/release.py), else the final training checkpoint (pretrain record) and the
# tokenizer files that load it (tokenizer manifest outputs). Paths are relative to the run directory, as
# `sha256sum -c` checks them.
TOKENIZER_RELEASED = ("tokenizer.model", "tokenizer.json", "tokenizer_config.json")
SHA256_FILE = "released_files.sha256"
DIGEST_METHOD = (f"sha256 of each file's bytes, as `sha256sum` computes it; {SHA256_FILE} lists them in sha256sum's "
                 f"format: verify with `cd <run directory> && sha256sum -c compliance/{SHA256_FILE}`")


def released_files(rec: Records) -> Fact:
    """[{path, sha256, bytes}] of every released file, from the records (nothing is hashed here)."""
    dtype = rec.settings.model.release_export
    if dtype is not None:
        ex = rec.export
        if ex is None:
            return open_fact(f"the {dtype} Hugging Face export of the final checkpoint ([compliance.model] release_export): "
                             "run the compliance stage (it writes export/step-<N>-" + dtype + "/), or europa export hf "
                             f"--dtype {dtype}")
        files = [{"path": f"{ex.folder}/{name}", "sha256": digest, "bytes": size} for name, digest, size in ex.files]
        return Fact(files, _files_text(files), (ex.sums,),
                    f"the Hugging Face export ({dtype}) of checkpoint step-{ex.step}: every file of the folder, with the "
                    "sha256 europa export wrote while writing it")
    ckpt = rec.pretrain.checkpoint.files.fact()
    tok = rec.manifests.get("tokenizer")
    if tok is None:
        return open_fact("the tokenizer stage's record (tokenizer/manifest.json): run the tokenizer stage")
    outputs = {o.path: o for o in tok.outputs}
    missing = [n for n in TOKENIZER_RELEASED if n not in outputs]
    if missing:
        return open_fact(f"tokenizer/manifest.json: outputs {', '.join(missing)} (absent in the record)")

    def files(ck: list) -> list[dict]:
        out = [{"path": f"pretrain/{f['path']}", "sha256": f["sha256"], "bytes": f["bytes"]} for f in ck]
        out += [{"path": f"tokenizer/{n}", "sha256": outputs[n].sha256, "bytes": outputs[n].bytes} for n in TOKENIZER_RELEASED]
        return out

    tokenizer_outputs = Fact(True, "", ("tokenizer/manifest.json: outputs[].sha256",))
    return derive(lambda ck, _: files(ck), ckpt, tokenizer_outputs,
                  method="the final training checkpoint's files (torchtitan DCP, with the optimizer state: not a "
                         "distributable form; declare [compliance.model] release_export for the export's) and the "
                         "tokenizer files, each with its sha256", fmt=_files_text)


def _files_text(files: list[dict]) -> str:
    return f"{len(files)} files, sha256 of each in {SHA256_FILE} ({sum(f['bytes'] for f in files):,} bytes in all)"


def sha256sums(files: list[dict]) -> str:
    """The `sha256sum` format: '<hex>  <path>' per line."""
    return "".join(f"{f['sha256']}  {f['path']}\n" for f in files)


def context_length(rec: Records) -> Fact:
    return rec.pretrain.model.context_length.fact(lambda n: f"{n:,} tokens")


def architecture(rec: Records) -> Fact:
    return rec.pretrain.model.architecture.fact()


def architecture_summary(rec: Records) -> Fact:
    """About 20 words, as the form recommends: the recorded architecture, depth, width and size."""
    keys = ("architecture", "n_layers", "n_dense_layers", "dim", "total_params", "active_params")
    facts = [getattr(rec.pretrain.model, k).fact() for k in keys]

    def text(arch, layers, dense, dim, total, active) -> str:
        return f"{arch}; {layers} layers ({dense} dense), width {dim}; {sci(total)} parameters, {sci(active)} active per token."

    return derive(text, *facts, method="pretrain statistics.model fields", fmt=str)


def dimensions_rows(rec: Records) -> list[list[Fact]]:
    rows = []
    for key, label in (("flavor", "flavor"), ("dim", "model dimension"), ("n_layers", "layers"), ("n_dense_layers", "dense layers"),
                       ("num_experts", "routed experts per MoE layer"), ("top_k", "experts active per token"),
                       ("num_shared_experts", "shared experts"), ("vocab_size", "vocabulary"), ("context_length", "context length (tokens)"),
                       ("total_params", "parameters, total"), ("active_params", "parameters, active per token"),
                       ("active_matmul_params", "parameters in matmuls per token (N of 6N)")):
        fmt = with_sig2 if key.endswith("params") else show
        field = getattr(rec.pretrain.model, key)
        rows.append([constant(label, source=field.where), field.fact(fmt)])
    return rows


def io_format(rec: Records) -> Fact:
    """Inputs and outputs: text as SentencePiece tokens of the run's tokenizer."""
    kind = rec.tokenizer.model.type.fact()
    vocab = rec.tokenizer.model.vocab_size.fact()
    fallback = rec.tokenizer.model.byte_fallback.fact()
    code = constant("SentencePiece", source="pipeline code: stages/tokenizer/train.py (SentencePiece), hf_export.py (tokenizer.json)")
    return derive(lambda t, v, fb, _: f"text (UTF-8) in and out, as tokens of a SentencePiece {t.upper()} tokenizer with {v:,} pieces"
                                      f"{' and byte fallback' if fb else ''} (tokenizer/tokenizer.model, tokenizer/tokenizer.json)",
                  kind, vocab, fallback, code, method="tokenizer statistics.model", fmt=str)


def max_input(rec: Records) -> Fact:
    return derive(lambda n: f"{n:,} tokens (context window); output up to the same window", context_length(rec),
                  method="the context length the model was trained with", fmt=str)


def software(rec: Records) -> Fact:
    facts = [rec.pretrain.training.torch_version.fact(), rec.pretrain.training.torchtitan_version.fact(),
             rec.manifest_field(P, "package_version")]
    return derive(lambda t, tt, pkg: f"PyTorch {t}, torchtitan {tt}, europa-pipeline {pkg} (model code and tokenizer loading)",
                  *facts, method="pretrain record: training software versions", fmt=str)


def checkpoint_path(rec: Records) -> Fact:
    return rec.pretrain.checkpoint.path.fact(lambda p: f"pretrain/{p}")


def training_design(rec: Records) -> Fact:
    """Training methodology from the records: objective, optimizer, schedule, batch, precision, parallelism."""
    t = lambda k: getattr(rec.pretrain.training, k).fact()  # noqa: E731
    facts = [t("optimizer"), t("lr"), t("steps"), t("global_batch_size"), t("seq_len"), t("precision"), t("tokens_seen"),
             rec.manifest_field(P, "config.schedule"), rec.manifest_field(P, "config.parallelism"), objective()]

    def text(opt, lr, steps, batch, seq, prec, seen, sched, par, obj) -> str:
        return (f"Pre-training on {obj}. Optimizer {opt}, peak learning rate {lr:g}, "
                f"warmup {sched.get('warmup_steps')} steps then {sched.get('decay_type')} decay over the last "
                f"{sched.get('decay_ratio')} of {steps:,} steps to {sched.get('min_lr_factor')} x peak; "
                f"global batch {batch} sequences of {seq:,} tokens ({seen:,} tokens seen); {prec} parameters; "
                f"parallelism: {par.get('nodes')} node(s) x {par.get('processes_per_node')} process(es), "
                f"data-parallel replicate {par.get('data_parallel_replicate')}, expert-parallel {par.get('expert_parallel')}, "
                f"tensor-parallel {par.get('tensor_parallel')}.")

    return derive(text, *facts, method="pretrain statistics.training and config (schedule, parallelism)", fmt=str)


def objective() -> Fact:
    return constant("next-token prediction (cross-entropy)", source=OBJECTIVE_SOURCE)
