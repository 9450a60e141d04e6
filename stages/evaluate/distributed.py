"""Evaluation as a distributed job, for checkpoints no single device holds:
`python -m stages.evaluate.distributed --run-dir R --job-dir J --checkpoint C` on every rank (torchrun locally,
srun + torchrun on JUPITER: stages/evaluate/job.py starts it).

Every rank builds the model sharded as training shards it (europa_model/sharded.py: FSDP2 over all ranks,
experts over [evaluate.job] expert_parallel), loads the checkpoint into that layout (DCP reshards), and packs
the same texts into the same rows (texts.py, europa_model/data/packing.py). The rows of all sets and languages
are dealt round-robin to the ranks; each rank scores its rows in batches, all ranks running the same number of
forward passes (FSDP and expert parallelism are collective: a rank out of rows runs a padding row), and rank
0 gathers the per-token losses and turns them into the per-document figures exactly as one process does
(scoring.per_document), then writes J/result.json. So the figures do not depend on the number of ranks beyond
float rounding (tests/evaluate: 2 gloo ranks = 1 process within 1e-5). Then [[evaluate.tasks]] run through
lm-eval on every rank, its loglikelihood requests answered by the sharded model (sharded_lm.py); rank 0 adds
their figures to the result.

A rank that fails writes J/failures/rank-<R>.json (its error, one line); the parent reports it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

RESULT = "result.json"
FAILURES = "failures"


def score_distributed(model, sets, *, seq_len: int, batch_size: int, bos: int, device: str, rank: int, world: int):
    """{(set, lang): Score} on rank 0 (None on the others) for `sets` = {set: ({lang: EvalTexts}, missing)}."""
    import torch.distributed as dist

    from europa_model.data.packing import PAD_LABEL, pack_documents
    from stages.evaluate.scoring import per_document, token_losses

    keys = [(s, lang) for s, (by_lang, _) in sets.items() for lang in by_lang]
    packed = {k: pack_documents(sets[k[0]][0][k[1]].docs, seq_len, bos) for k in keys}
    rows = [(k, i) for k in keys for i in range(len(packed[k][0]))]
    mine = rows[rank::world]
    per_rank = math.ceil(len(rows) / world)
    n_batches = math.ceil(per_rank / batch_size)
    out: list[tuple[int, np.ndarray, np.ndarray]] = []  # (global row index, nll, right)
    index = {r: j for j, r in enumerate(rows)}
    pad = (np.full((1, seq_len), bos, np.int64), np.full((1, seq_len), PAD_LABEL, np.int64),
           np.arange(seq_len, dtype=np.int64)[None])
    for b in range(n_batches):
        chunk = mine[b * batch_size:(b + 1) * batch_size]
        if chunk:
            x, y, p = (np.stack([packed[k][part][i] for k, i in chunk]) for part in range(3))
        else:
            x, y, p = pad  # keeps this rank in step with the others' collectives; never scored
        nll, right = token_losses(model, x, y, p, batch_size=len(x), device=device)
        out += [(index[r], nll[j], right[j]) for j, r in enumerate(chunk)]
    gathered = [None] * world if rank == 0 else None
    dist.gather_object(out, gathered, dst=0)
    if rank != 0:
        return None
    by_row = {j: (nll, right) for part in gathered for j, nll, right in part}
    scores = {}
    start = 0
    for k in keys:
        inputs, labels, _ = packed[k]
        n = len(inputs)
        nll = np.stack([by_row[j][0] for j in range(start, start + n)])
        right = np.stack([by_row[j][1] for j in range(start, start + n)])
        start += n
        texts = sets[k[0]][0][k[1]]
        scores[k] = per_document(nll, right, labels, texts.docs, texts.doc_bytes)
    return scores


def run_sharded_tasks(model, run_dir, settings, languages: list[str], flavor: str, *, device: str, rank: int,
                      world: int):
    """[[evaluate.tasks]] through lm-eval on the sharded model (sharded_lm.py), on every rank; the parent has
    built the tasks it builds (their include_path is set in the job's config)."""
    from europa_model.flavors import FLAVORS
    from stages.evaluate.sharded_lm import ShardedLM, load_tokenizer
    from stages.evaluate.tasks import evaluate_tasks, offline

    with offline():
        tokenizer = load_tokenizer(run_dir.stage_dir("tokenizer"))

        def sharded():
            return ShardedLM(model, tokenizer, device=device, batch_size=settings.batch_size,
                             max_length=FLAVORS[flavor].max_seq_len, rank=rank, world=world)

        return evaluate_tasks(sharded, settings.tasks, languages)


def _device(requested: str, local_rank: int) -> str:
    from europa_model.devices import resolve_device

    device = resolve_device(requested)
    if device == "cuda":
        import torch

        torch.cuda.set_device(local_rank)
        return f"cuda:{local_rank}"
    return device


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m stages.evaluate.distributed")
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--job-dir", required=True, type=Path)
    ap.add_argument("--checkpoint", required=True, type=Path)
    ap.add_argument("--config", type=Path, default=None, help="the settings to use (default: the run's run.toml)")
    args = ap.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    try:
        return _evaluate(args, rank)
    except BaseException as e:
        folder = args.job_dir / FAILURES
        folder.mkdir(parents=True, exist_ok=True)
        message = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        (folder / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "error": type(e).__name__,
                                                              "message": message[:500]}) + "\n")
        raise


def _evaluate(args: argparse.Namespace, rank: int) -> int:
    import torch
    import torch.distributed as dist

    from europa_model.checkpoints import Checkpoint, model_info
    from europa_model.sharded import build_sharded_model
    from pipeline.config import load_config
    from pipeline.fsutil import atomic_write_text
    from pipeline.rundir import RunDir
    from pipeline.runconfig import load_run_config
    from stages.evaluate.metrics import EvalJob
    from stages.evaluate.results import checkpoint_metrics
    from stages.evaluate.scoring import load_weights
    from stages.evaluate.texts import load_eval_texts

    run_dir = RunDir(args.run_dir)
    config = load_config(args.config) if args.config else load_run_config(run_dir)
    settings = config.section("evaluate")
    pretrain = config.section("pretrain")
    ckpt = Checkpoint(int(args.checkpoint.name.removeprefix("step-")), args.checkpoint.resolve())
    info = model_info(ckpt)
    if info is None:
        raise SystemExit(f"checkpoint {ckpt.path}: no job_info.json beside its checkpoints folder")
    device = _device(settings.device, int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo")
    try:
        world = dist.get_world_size()
        model = build_sharded_model(info.flavor, info.vocab_size, device,
                                    expert_parallel=settings.job.expert_parallel, precision=settings.job.precision,
                                    dump_folder=str(args.job_dir), routing=info.routing)
        load_weights(model, ckpt.path, info.flavor, info.vocab_size, distributed=True)
        sp, sets = load_eval_texts(run_dir, config, settings)
        seq_len = settings.seq_len or pretrain.seq_len
        with torch.no_grad():
            scores = score_distributed(model, sets, seq_len=seq_len, batch_size=settings.batch_size, bos=sp.bos_id(),
                                       device=device, rank=rank, world=world)
            tasks = run_sharded_tasks(model, run_dir, settings, list(config.run.languages), info.flavor, device=device,
                                      rank=rank, world=world) if settings.tasks else None
        if rank == 0:
            metrics = checkpoint_metrics(ckpt, info.flavor, sets, scores, seq_len=seq_len,
                                         job=EvalJob(launcher=settings.job.launcher, ranks=world,
                                                     expert_parallel=settings.job.expert_parallel,
                                                     precision=settings.job.precision, device=device.split(":")[0]))
            if tasks is not None:
                from stages.evaluate.metrics import TaskFigures

                metrics.tasks = {name: {lang: TaskFigures.model_validate(f) for lang, f in by_lang.items()}
                                 for name, by_lang in tasks.results.items()}
                metrics.tasks_missing, metrics.task_reasons = tasks.missing, tasks.reasons
            atomic_write_text(args.job_dir / RESULT, json.dumps(metrics.to_dict()) + "\n")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
