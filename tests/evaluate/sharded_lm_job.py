"""Run under torchrun by tests/evaluate/test_distributed.py: lm-eval loglikelihood requests answered by
ShardedLM on the job's ranks (FSDP2, expert parallel 2, gloo) and, on rank 0, by lm-eval's HFLM on the fp32
Hugging Face export of the same checkpoint; rank 0 writes both answer lists as JSON to argv[2]."""

import json
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from europa_model.checkpoints import Checkpoint, model_info
from europa_model.flavors import FLAVORS
from europa_model.sharded import build_sharded_model
from stages.evaluate.scoring import load_weights
from stages.evaluate.sharded_lm import ShardedLM, load_tokenizer
from stages.evaluate.tasks import offline

# a context and a continuation each, as lm-eval makes them: a trailing space moved to the continuation, an empty
# context (BOS alone), a context longer than max_length (left-truncated)
REQUESTS = [("Alle Menschen sind frei und", " gleich"), ("Alle Menschen sind frei und ", "gleich an Würde"),
            ("", "Jeder hat das Recht auf Leben."), ("Kaikilla ihmisillä on", " oikeus elämään"),
            ("Ο καθένας έχει δικαίωμα", " στη ζωή"), ("x " * 40, "y z")]
MAX_LENGTH = 48


def main() -> None:
    run, out = Path(sys.argv[1]), Path(sys.argv[2])
    ckpt = Checkpoint(6, (run / "pretrain" / "checkpoints" / "step-6").resolve())
    info = model_info(ckpt)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = build_sharded_model(info.flavor, info.vocab_size, "cpu", expert_parallel=2, precision="float32",
                                dump_folder=str(out.parent), routing=info.routing)
    load_weights(model, ckpt.path, info.flavor, info.vocab_size, distributed=True)
    requests = [SimpleNamespace(args=r) for r in REQUESTS]
    assert MAX_LENGTH < FLAVORS[info.flavor].max_seq_len
    with offline(), torch.no_grad():
        lm = ShardedLM(model, load_tokenizer(run / "tokenizer"), device="cpu", batch_size=2, max_length=MAX_LENGTH,
                       rank=rank, world=dist.get_world_size())
        sharded = lm.loglikelihood(requests)
        if rank == 0:
            from lm_eval.models.huggingface import HFLM

            from europa_model.hf import export_checkpoint

            with tempfile.TemporaryDirectory() as tmp:
                folder = export_checkpoint(ckpt.path, info.flavor, info.vocab_size, Path(tmp) / "hf", dtype="fp32",
                                           tokenizer_dir=run / "tokenizer", routing=info.routing).out_dir
                hf = HFLM(pretrained=str(folder), device="cpu", dtype="float32", batch_size=3, add_bos_token=True,
                          max_length=MAX_LENGTH).loglikelihood(requests)
            out.write_text(json.dumps({"sharded": sharded, "hf": hf}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
