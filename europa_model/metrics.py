"""torchtitan's metrics, plus `metrics.jsonl`: one JSON line per logged step that the pipeline can read.

TensorBoard files are for people; the pretrain stage's manifest (tokens seen, throughput, utilisation, final
loss) and the compliance documents need a plain record, so the metrics rank also appends every logged step to
`<job>/metrics.jsonl` (flushed per line: a crash loses at most the line being written). The peak FLOP/s used
for the logged utilisation is given explicitly: the device's theoretical peak that the pretrain stage's record
uses too (stages/pretrain/peak_flops.py: a table for GPUs, cores x clock x FLOPs per cycle for a CPU).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import torch
from torchtitan.components.metrics import BaseLogger, LoggerContainer, MetricsProcessor, _get_metrics_rank

# torchtitan's metric names -> ours (stable keys that the stage and the compliance documents read)
_RENAME = {
    "loss_metrics/global_avg_loss": "loss",
    "loss_metrics/global_max_loss": "max_loss",
    "grad_norm": "grad_norm",
    "throughput(tps)": "tokens_per_s_per_device",
    "tflops": "tflops_per_device",
    "mfu(%)": "mfu_pct",
    "memory/max_reserved(GiB)": "memory_gib",
    "memory/max_active(GiB)": "memory_active_gib",
    "time_metrics/end_to_end(s)": "step_time_s",
    "time_metrics/data_loading(s)": "data_loading_s",
    "n_tokens_seen": "tokens_seen",  # summed over the data-parallel ranks by torchtitan
}


class JsonlLogger(BaseLogger):
    def __init__(self, path: str, world_size: int, peak_flops: float):
        self.path, self.world_size, self.peak_flops = path, world_size, peak_flops
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self.file = open(path, "a", encoding="utf-8")
        self.t0 = time.time()

    def log(self, metrics: dict[str, Any], step: int) -> None:
        row: dict[str, Any] = {"step": step, "time": round(time.time(), 3)}
        for key, value in metrics.items():
            if key.startswith("lr/"):
                row.setdefault("lr", float(value))
            elif key in _RENAME:
                row[_RENAME[key]] = float(value)
        row["world_size"] = self.world_size
        row["peak_flops_per_device"] = self.peak_flops
        self.file.write(json.dumps(row) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class TrainingDiverged(RuntimeError):
    """The loss left its bounds: the job stops, and says at which step and why (stages/pretrain/failure.py)."""

    def __init__(self, step: int, detail: str):
        super().__init__(f"Loss exploded ({detail}) at step {step}. Stopping training.")
        self.step, self.detail = step, detail


class EuropaMetricsProcessor(MetricsProcessor):
    @dataclass(kw_only=True, slots=True)
    class Config(MetricsProcessor.Config):
        jsonl_file: str = "metrics.jsonl"
        """Relative to the job folder (dump_folder)."""

        peak_flops_per_device: float | None = None
        """Peak FLOP/s of one device for utilisation; None = torchtitan's GPU table."""

        max_loss: float | None = None
        """Stop when a logged loss exceeds this (diverged); torchtitan itself stops only on NaN/inf."""

    def __init__(self, config: Config, *, parallel_dims, dump_folder: str = "./outputs", **kwargs):
        super().__init__(config, parallel_dims=parallel_dims, dump_folder=dump_folder, **kwargs)
        if config.peak_flops_per_device:
            self.gpu_peak_flops = config.peak_flops_per_device
        world = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        metrics_rank = _get_metrics_rank(parallel_dims=parallel_dims, pp_schedule=kwargs.get("pp_schedule", "1F1B"))
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        if rank == metrics_rank:
            container = self.logger if isinstance(self.logger, LoggerContainer) else LoggerContainer()
            if container is not self.logger and type(self.logger) is not BaseLogger:
                container.add_logger(self.logger)
            container.add_logger(JsonlLogger(os.path.join(dump_folder, config.jsonl_file), world, self.gpu_peak_flops))
            self.logger = container

    def log(self, step: int, global_avg_loss: float, global_max_loss: float, grad_norm: float, extra_metrics=None):
        super().log(step, global_avg_loss, global_max_loss, grad_norm, extra_metrics=extra_metrics)
        if self.config.max_loss is not None and global_avg_loss > self.config.max_loss:
            raise TrainingDiverged(step, f"global_avg_loss={global_avg_loss:.4g} > max_loss {self.config.max_loss:.4g}")
