"""`[pretrain]` settings + the run's tokenizer and shards -> torchtitan's `Trainer.Config`.

This is the one place where our settings meet torchtitan's; the same function builds the config for a
one-process CPU test, a torchrun on two CPU ranks and 1,536 GH200s (the entry point calls it on every rank).
Choices torchtitan leaves open that matter here:
- the dataloader is ours (`EuropaShardsDataLoader` over <run>/shards with mixture.json), the tokenizer folder
  is the tokenizer stage's (tokenizer.json + tokenizer_config.json, read by torchtitan's HuggingFaceTokenizer);
- on CPU: float32 parameters, `partial_dtensor` SPMD backend for multi-rank runs (torch 2.13's fully_shard
  rejects torchtitan's default `spmd_types` there), no CUDA graphs;
- checkpoints: DCP, `<job>/checkpoints/step-N`, full training state in every one (the last too) so a job can
  be resumed or extended, and so evaluation can read any of them; each rank hashes its files while saving
  (europa_model/checkpoint_digests.py).
"""

from __future__ import annotations

import math
from pathlib import Path

from europa_model import cpu_compat

cpu_compat.apply()

from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss  # noqa: E402
from torchtitan.components.optimizer import LRSchedulersContainer, OptimizersContainer  # noqa: E402
from torchtitan.components.optimizer.optimizer import ParamGroupConfig  # noqa: E402
from torchtitan.config import ParallelismConfig, TrainingConfig  # noqa: E402
from torchtitan.config.configs import DebugConfig  # noqa: E402
from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: E402
from torchtitan.models.common.config_utils import decoder_vocab_size  # noqa: E402
from torchtitan.trainer import Trainer  # noqa: E402

from europa_model.checkpoint_digests import EuropaCheckpointManager  # noqa: E402
from europa_model.data.loader import EuropaShardsDataLoader  # noqa: E402
from europa_model.flavors import model_registry  # noqa: E402
from europa_model.metrics import EuropaMetricsProcessor  # noqa: E402
from stages.pretrain.config import PretrainConfig  # noqa: E402

CHECKPOINT_FOLDER = "checkpoints"


class UnsupportedSetting(ValueError):
    """A setting that cannot work where the job would run; the message names the key and what works."""


FLOAT8_KEPT_IN_BF16 = ["lm_head", "router.gate"]  # as torchtitan's own DeepSeek-V3 float8 configs keep them


def float8_converters(recipe: str, compile_enabled: bool, *, emulate: bool = False) -> list:
    """torchtitan's float8 converters for `[pretrain] float8`: the dense linears and the grouped experts.
    `emulate` (tests only) lets torchao convert on a machine without float8 tensor cores."""
    from importlib.util import find_spec

    from torchtitan.components.quantization import Float8GroupedExpertsConverter, Float8LinearConverter

    if find_spec("torchao") is None:
        raise UnsupportedSetting(f"[pretrain] float8 = \"{recipe}\" needs torchao, which this environment lacks: "
                                 "pip install -e \".[float8]\" (the version the project pins), or leave float8 unset")
    return [Float8LinearConverter.Config(recipe_name=recipe, filter_fqns=list(FLOAT8_KEPT_IN_BF16),
                                         model_compile_enabled=compile_enabled, emulate=emulate),
            Float8GroupedExpertsConverter.Config(model_compile_enabled=compile_enabled)]


def build_trainer_config(
    settings: PretrainConfig,
    *,
    shards_dir: Path,
    tokenizer_dir: Path,
    job_dir: Path,
    vocab_size: int,
    device_type: str,
    seed: int,
    peak_flops_per_device: float | None = None,
    initial_load_path: str | None = None,
    seed_checkpoint: bool = False,
) -> Trainer.Config:
    p = settings.parallelism
    ac = settings.activation_checkpoint
    offload = ac.mode == "offload"
    if offload and device_type != "cuda":
        raise UnsupportedSetting(
            "[pretrain.activation_checkpoint] mode = \"offload\" moves checkpointed activations from GPU memory "
            "to host memory and needs CUDA and torch.compile (torchtitan's graph_trainer); this job runs on "
            f"{device_type}: use mode = \"selective\" or \"full\" here")
    moe = settings.moe
    routing = settings.routing_problem()
    if routing:
        raise UnsupportedSetting(routing)
    if moe.comm_backend == "deepep" and device_type != "cuda":
        raise UnsupportedSetting(
            f"[pretrain.moe] comm_backend = \"deepep\" runs DeepEP's CUDA kernels; this job runs on {device_type}: "
            "use comm_backend = \"standard\" here")
    if settings.float8 and device_type != "cuda":
        raise UnsupportedSetting(
            f"[pretrain] float8 = \"{settings.float8}\" runs float8 matmuls on Hopper-class GPUs (SM89 or later); this "
            f"job runs on {device_type}: leave float8 unset here")
    world = p.world_size
    multi_rank_cpu = device_type == "cpu" and world > 1

    model_spec = model_registry(settings.flavor, vocab_size, unshard_async_op=p.unshard_async_op,
                                graph_trainer=offload, moe_comm_backend=moe.comm_backend,
                                num_expert_groups=moe.num_expert_groups, num_limited_groups=moe.num_limited_groups,
                                converters=float8_converters(settings.float8, settings.compile) if settings.float8 else None)
    common = dict(
        model_spec=model_spec,
        hf_assets_path=str(tokenizer_dir),
        dump_folder=str(job_dir),
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))),
        metrics=EuropaMetricsProcessor.Config(log_freq=settings.log_every, enable_tensorboard=True,
                                              save_tb_folder="tb", disable_color_printing=True,
                                              peak_flops_per_device=peak_flops_per_device,
                                              max_loss=(settings.max_loss_factor * math.log(vocab_size)
                                                        if settings.max_loss_factor else None)),
        dataloader=EuropaShardsDataLoader.Config(dataset_path=str(shards_dir), seed=seed, order=settings.data_order,
                                                 max_open_shards=settings.max_open_shards),
        optimizer=_optimizer(settings, model_spec),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=settings.schedule.warmup_steps,
            decay_ratio=settings.schedule.decay_ratio,
            decay_type=settings.schedule.decay_type,
            min_lr_factor=settings.schedule.min_lr_factor,
        ),
        training=TrainingConfig(
            local_batch_size=settings.local_batch_size,
            global_batch_size=settings.global_batch_size or -1,
            seq_len=settings.seq_len,
            steps=settings.steps,
            max_norm=settings.max_norm,
            mixed_precision_param=settings.precision,
            disable_cuda_graphs=True,
        ),
        parallelism=ParallelismConfig(
            data_parallel_replicate_degree=p.data_parallel_replicate,
            data_parallel_shard_degree=p.data_parallel_shard,
            tensor_parallel_degree=p.tensor_parallel,
            expert_parallel_degree=p.expert_parallel,
            **({"spmd_backend": "partial_dtensor"} if multi_rank_cpu or settings.optimizer.name == "dist_muon" else {}),
        ),
        checkpoint=EuropaCheckpointManager.Config(
            enable=True,
            folder=CHECKPOINT_FOLDER,
            interval=settings.checkpoint.interval,
            keep_latest_k=settings.checkpoint.keep_latest,
            last_save_model_only=False,
            initial_load_path=initial_load_path,
            initial_load_model_only=True,
            create_seed_checkpoint=seed_checkpoint,
        ),
        activation_checkpoint=_activation_checkpoint(settings),
        debug=DebugConfig(seed=seed),
    )
    if offload:
        from torchtitan.experiments.graph_trainer.configs import GraphTrainerCompileConfig
        from torchtitan.experiments.graph_trainer.trainer import GraphTrainer

        compile_config = GraphTrainerCompileConfig(
            enable=True, memory_policy="sac_and_offload", cpu_offload_budget_gb=ac.offload_budget_gb,
            cpu_offload_prefetch_n_layers=ac.offload_prefetch_layers)
        return GraphTrainer.Config(**common, compile=compile_config)
    config = Trainer.Config(**common)
    if settings.compile:
        config.compile.enable = True
        config.compile.components = ["model", "loss"]
    return config


def _activation_checkpoint(settings: PretrainConfig):
    ac = settings.activation_checkpoint
    if ac.mode == "selective":
        return SelectiveAC.Config()  # torchtitan's op-level policy: save matmuls, recompute the rest
    if ac.mode == "full":
        return FullAC.Config()
    return None  # "none", and "offload" (graph_trainer's memory policy does SAC + offload itself)


def _optimizer(settings: PretrainConfig, model_spec) -> OptimizersContainer.Config:
    o = settings.optimizer
    adamw = {"lr": o.lr, "betas": (o.beta1, o.beta2), "eps": o.eps, "weight_decay": o.weight_decay}
    if o.name == "adamw":
        return OptimizersContainer.Config(
            param_groups=[ParamGroupConfig(pattern=r".*", optimizer_name="AdamW", optimizer_kwargs=adamw)])
    from europa_model.optimizers import dist_muon_optimizer

    return dist_muon_optimizer(model_spec.model, lr=o.lr, weight_decay=o.weight_decay, betas=(o.beta1, o.beta2),
                               eps=o.eps, momentum=o.muon_momentum, ns_steps=o.muon_ns_steps)
