"""The pretrain stage: train the EUROPA MoE with torchtitan on the run's tokenizer and shards.

A `RunStage` with a long job: `run` starts the training job as a subprocess (`launcher = "local"`: one process;
`"torchrun"`: N ranks on this machine) or submits it to Slurm (`"slurm"`: the machine of [pretrain.machine],
JUPITER's Booster by default) and follows it until it ends, showing its state, steps, loss and new
checkpoints. The job writes into the stage's job folder (RunDir.job_dir, or the folder of the same training
it adopts: folders.py), which survives crashes; running the stage again resumes from its newest complete
checkpoint. [pretrain.slurm] and [pretrain.machine] decide where and how the job runs, not what it trains:
they stay out of the fingerprint, so raising a time limit continues the same checkpoints. When training
has reached `steps`, the job folder is published as <run>/pretrain/ (hard links: no copy of the checkpoints,
and the job folder stays intact until the publish has succeeded) with the record (record.py) the compliance
stage needs: tokens, steps, time, devices, device-hours, training FLOPs, and the checksums of every kept
checkpoint, which the training ranks computed while saving (no checkpoint is read again to publish). Training
compute is recorded three ways (compute_statistics): the architecture-based estimate that is reported, the
operations counted in one real step as its check, and the hardware bound (devices x seconds x peak theoretical
throughput) with the utilisation it implies. Why a training process stopped comes from the failure file it
writes (failure.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any, ClassVar

from europa_model.checkpoints import complete_checkpoints, recorded_digests
from europa_model.devices import resolve_device
from pipeline import progress
from pipeline.config import REPO_ROOT
from pipeline.fsutil import sha256_files
from pipeline.manifest import Manifest, digest
from pipeline.stage import Detached, RunStage, StageContext, StageError, StageOutcome
from stages.pretrain import job as jobdir
from stages.pretrain import step_count
from stages.pretrain.config import PretrainConfig
from stages.pretrain.failure import clear_failures, read_failure
from stages.pretrain.folders import holds_training, settle_job_folder
from stages.pretrain.follow import SlurmFollower
from stages.pretrain.launch import slurm
from stages.pretrain.record import PretrainRecord

# what the published stage folder keeps of the job folder (seed checkpoints and comm traces stay behind)
PUBLISHED = ("checkpoints", "metrics.jsonl", "segments.jsonl", "job_info.json", "flop_count.json", "train.log", "tb",
             "job.sbatch", "plan.txt", "plan.json", "jobs.jsonl", "slurm-*.out")


Ctx = StageContext[PretrainConfig]


class PretrainStage(RunStage[PretrainConfig]):
    name: ClassVar[str] = "pretrain"
    code_version: ClassVar[str] = "4"
    config_model = PretrainConfig
    long_job: ClassVar[bool] = True  # trains in ctx.job_dir, which evaluation reads while the job runs
    launch_only_settings: ClassVar[tuple[str, ...]] = ("slurm", "machine")  # where it runs, not what it trains

    def keep_work(self, folder: Path) -> bool:
        """A work folder of other settings that holds checkpoints outlives a publish: only --force deletes it."""
        return holds_training(folder)

    def run(self, ctx: Ctx, out_dir: Path) -> StageOutcome:
        job = self._train(ctx)
        return self._publish(ctx, job, out_dir)

    # --- the job ------------------------------------------------------------------------------------------
    def _train(self, ctx: Ctx) -> Path:
        settings = ctx.settings
        job = settle_job_folder(ctx)
        done = complete_checkpoints(job)
        if done and done[-1].step >= settings.steps:
            progress.note(self.name, f"job already reached step {done[-1].step}; nothing to train")
        elif settings.launcher == "slurm":
            self._follow_slurm(ctx, job)
        else:
            if done:
                progress.note(self.name, f"resuming from {done[-1].name} of {job}")
            self._run_local(ctx, job)
        final = complete_checkpoints(job)
        if not final or final[-1].step < settings.steps:
            reached = final[-1].step if final else 0
            raise StageError(
                f"stage pretrain: training ended at step {reached} of {settings.steps} without an error exit "
                f"(ran out of data or was stopped); see {job / 'train.log'}; rerun to resume from the last checkpoint")
        return job

    def _command(self, ctx: Ctx, job: Path, *extra: str) -> list[str]:
        return [sys.executable, "-m", "stages.pretrain.entry", "--run-dir", str(ctx.run_dir.path), "--job-dir", str(job), *extra]

    def _run_local(self, ctx: Ctx, job: Path) -> None:
        settings = ctx.settings
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        world = settings.parallelism.world_size
        if settings.launcher == "torchrun":
            if resolve_device(settings.device) == "cpu" and not complete_checkpoints(job) \
                    and not (job / "seed" / "checkpoints" / "step-0" / ".metadata").exists():
                progress.note(self.name, "writing a seed checkpoint (CPU ranks cannot initialise sharded experts differently)")
                self._stream(self._command(ctx, job, "--seed-checkpoint"), env, job, "seed", 0)
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world}",
                   "-m", "stages.pretrain.entry", "--run-dir", str(ctx.run_dir.path), "--job-dir", str(job)]
        else:
            cmd = self._command(ctx, job)
        progress.note(self.name, f"training {settings.flavor} for {settings.steps} steps on {world} process(es); log {job / 'train.log'}")
        self._stream(cmd, env, job, "train", settings.steps)

    def _stream(self, cmd: list[str], env: dict, job: Path, what: str, steps: int) -> None:
        """Run a training process, keep its output in train.log, show the training's live line (step, loss,
        tokens/s, ETA) from the metrics it records whenever it logs a step."""
        clear_failures(job)
        tail: deque[str] = deque(maxlen=15)
        first: tuple[int, float] | None = None  # the first step seen and when: the ETA leaves start-up out
        with open(job / "train.log", "a", encoding="utf-8") as log:
            log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n")
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, errors="replace")
            try:
                for line in proc.stdout:
                    log.write(line)
                    tail.append(line.rstrip())
                    if " step: " in line and (row := jobdir.last_metrics(job)) is not None:
                        first = first or (row["step"], time.monotonic())
                        progress.training(self.name, row["step"], steps, row.get("loss", float("nan")),
                                          row.get("tokens_per_s_per_device"), since=first)
                code = proc.wait()
            except BaseException:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
        if code != 0:
            raise self._failed(job, f"{what} process exited with {code}", tail[-1] if tail else "")

    @staticmethod
    def _failed(job: Path, what: str, last_line: str) -> StageError:
        """The stage's error for processes that ended badly, from the failure they recorded (or, when they died
        without a word, e.g. killed by a signal, the last line they printed)."""
        failure = read_failure(job)
        log = f"(full output: {job / 'train.log'})"
        if failure is not None and failure.kind == "diverged":
            good = [c for c in complete_checkpoints(job) if failure.step is None or c.step < failure.step]
            last = f"last good checkpoint {good[-1].path}" if good else "no checkpoint before it"
            return StageError(
                f"stage pretrain: training diverged at step {failure.step} ({failure.message}); {last}; "
                f"lower [pretrain.optimizer] lr or lengthen [pretrain.schedule] warmup_steps {log}")
        cause = failure.message if failure is not None else last_line.strip()
        return StageError(f"stage pretrain: {what}: {cause[:300]} {log}")

    def _follow_slurm(self, ctx: Ctx, job: Path) -> None:
        """Follow the job already submitted for this job folder (by `europa launch --submit` or an earlier run of
        this stage) while it is queued or running; otherwise submit one, which resumes from the newest
        checkpoint. Whether training is done is the checkpoints' say, not the job's end state (a job that
        reached the last step and then ran out of time trained everything; one Slurm has forgotten without
        accounting may have too)."""
        from stages.pretrain.launch.submit import submit_training_job

        follow = SlurmFollower(self.name, job, ctx.settings.slurm.poll_interval_s)
        last = slurm.last_job(job)
        following = last["job_id"] if last else None  # a job that may be queued or running
        try:
            status = follow.wait_until_known(following) if following else None
            if status is None or status.finished:
                following = None
                if status is not None:
                    progress.note(self.name, f"Slurm job {status.job_id} {status.describe()}; submitting a new job, "
                                             "which resumes from the newest checkpoint")
                clear_failures(job)
                following, rendered = submit_training_job(ctx, record_attempt=False)
                progress.note(self.name, f"submitted Slurm job {following} ({rendered.script_path}); following it")
            else:
                progress.note(self.name, f"following Slurm job {following}, submitted earlier for {job}")
            status = follow.until_finished(following)
        except KeyboardInterrupt:
            if following is None:
                raise
            state = follow.last.describe() if follow.last and follow.last.job_id == following else "state unknown"
            raise Detached(
                f"stopped following Slurm job {following}, which keeps running ({state}); follow it again with "
                f"`europa stage {self.name} --run-dir {ctx.run_dir.path}`, cancel it with `scancel {following}`") from None
        job_id = following
        done = complete_checkpoints(job)
        if done and done[-1].step >= ctx.settings.steps:
            if status.state != "COMPLETED":
                progress.note(self.name, f"Slurm job {job_id} {status.describe()}, after its checkpoints reached the "
                                         f"final step {done[-1].step}: training is complete")
            return
        failure = read_failure(job)
        if failure is not None and failure.kind == "diverged":
            raise self._failed(job, f"Slurm job {job_id} ended {status.state}", "")
        ended = status.describe() if status.state == slurm.ENDED else f"ended {status.state}"
        cause = f" ({failure.message[:300]})" if failure else ""
        reached = f"newest checkpoint {done[-1].name}" if done else "no checkpoint yet"
        hint = ("raise [pretrain.slurm] time_limit (it does not change what is trained) or rerun the stage to "
                "continue" if status.state == "TIMEOUT" else "rerun the stage to resubmit")
        tail = slurm.output_tail(job, job_id)
        raise StageError(f"stage pretrain: Slurm job {job_id} {ended}{cause}; {reached}; {hint} (it resumes from "
                         f"the newest checkpoint); {job}/slurm-{job_id}.out ends:\n{tail or '(no output)'}")

    # --- publishing -----------------------------------------------------------------------------------------
    def _publish(self, ctx: Ctx, job: Path, out_dir: Path) -> StageOutcome:
        for pattern in PUBLISHED:
            for src in sorted(job.glob(pattern)):
                if src.is_dir():
                    shutil.copytree(src, out_dir / src.name, copy_function=os.link)
                elif src.is_file():
                    os.link(src, out_dir / src.name)
        digests = checkpoint_digests(out_dir)
        record = training_statistics(ctx.settings, out_dir, digests)
        t, c = record.training, record.compute
        summary = {"steps": t.steps, "tokens": t.tokens_seen, "final loss": round(t.final_loss, 4),
                   "checkpoints": len(complete_checkpoints(out_dir)), "FLOPs": f"{c.architecture.flops:.2e}"}
        # every kept checkpoint's digests come from the ranks (or were computed once, above): no second read
        checksums = {path: sha for files in digests.values() for path, (sha, _, _) in files.items()}
        return StageOutcome(statistics=record, summary=summary, checksums=checksums)

    def summary_markdown(self, manifest: Manifest) -> str:
        s = manifest.statistics
        m, t, c = s["model"], s["training"], s["compute"]
        return "\n".join([
            f"# pretrain: {m['flavor']} ({m['total_params']:,} parameters, {m['active_params']:,} active)", "",
            "| figure | value |", "|---|---|",
            f"| steps | {t['steps']:,} |", f"| tokens | {t['tokens_seen']:,} |", f"| final loss | {t['final_loss']:.4f} |",
            f"| devices | {t['device_count']} x {t['device_type']} ({t['device_name']}) |",
            f"| wall time | {t['wall_time_s']:.0f} s |", f"| device-hours | {t['device_hours']:.4f} |",
            f"| (a) training FLOPs, architecture-based (reported) | {c['architecture']['flops']:.3e} |",
            "| (b) training FLOPs, counted in one step x steps | "
            + (f"{c['counted']['flops']:.3e} ({c['counted']['ratio_to_architecture']:.3f} x (a)) |" if c.get("counted") else f"not counted: {c.get('not_counted')} |"),
            "| (c) hardware bound, devices x seconds x peak | "
            + (f"{c['hardware']['flops']:.3e} (implied utilisation {c['hardware']['implied_utilisation']:.2%}) |" if c.get("hardware")
               else f"none: {c.get('no_hardware_bound')} |"),
            f"| final checkpoint | {s['checkpoint']['path']} |",
        ])


def checkpoint_digests(folder: Path) -> dict[int, dict[str, tuple[str, int, bool]]]:
    """Per complete checkpoint (by step): {path relative to `folder`: (sha256, bytes, hashed on the ranks)}.

    The ranks hashed their files while saving (checksums-rank<R>.json, europa_model/checkpoint_digests.py); only
    files no rank recorded (or whose size changed since) are read here, once, on up to 8 threads."""
    out: dict[int, dict[str, tuple[str, int, bool]]] = {}
    for ckpt in complete_checkpoints(folder):
        covered, missing = recorded_digests(ckpt.path)
        rel = ckpt.path.relative_to(folder).as_posix()
        files = {f"{rel}/{name}": (sha, size, True) for name, (sha, size) in covered.items()}
        for p_, sha in zip(missing, sha256_files(missing)):
            files[f"{rel}/{p_.name}"] = (sha, p_.stat().st_size, False)
        out[ckpt.step] = dict(sorted(files.items()))
    return out


def _kept(step: int, files: dict[str, tuple[str, int, bool]]) -> dict[str, Any]:
    return {"step": step, "path": f"checkpoints/step-{step}", "sha256": digest([(p_, f[0]) for p_, f in files.items()]),
            "files": len(files), "bytes": sum(f[1] for f in files.values()),
            "hashed_on_ranks": sum(f[2] for f in files.values()), "hashed_at_publish": sum(not f[2] for f in files.values())}


def training_statistics(settings: PretrainConfig, folder: Path,
                        digests: dict[int, dict[str, tuple[str, int, bool]]] | None = None) -> PretrainRecord:
    """The stage's record from a finished job folder (the contract compliance reads: record.py); `digests`:
    `checkpoint_digests(folder)`, computed here when not given."""
    from europa_model.flavors import FLAVORS, count_parameters
    from europa_model.flops import training_flops_per_token

    info = jobdir.job_info(folder)
    rows = jobdir.metrics(folder)
    segs = jobdir.segments(folder)
    final = complete_checkpoints(folder)[-1]
    if not info or not rows:
        raise StageError(f"stage pretrain: {folder} lacks job_info.json or metrics.jsonl; the job did not start "
                         "properly; rerun with --force")
    f = FLAVORS[settings.flavor]
    counts = count_parameters(settings.flavor, info["vocab_size"])
    global_batch = settings.global_batch
    tokens = final.step * settings.tokens_per_step
    per_token = training_flops_per_token(settings.flavor, info["vocab_size"], settings.seq_len)
    wall = sum(s["end"] - s["start"] for s in segs)
    device_seconds = sum((s["end"] - s["start"]) * s["world_size"] for s in segs)
    steady = [r for r in rows if r["step"] > 1] or rows  # step 1 pays for start-up and lazy initialisation
    digests = checkpoint_digests(folder) if digests is None else digests
    files = [{"path": p_, "sha256": f[0], "bytes": f[1]} for p_, f in digests[final.step].items()]
    planned_tokens = settings.planned_tokens
    return PretrainRecord.model_validate({
        "model": {
            "flavor": settings.flavor,
            "architecture": "decoder-only transformer, Mixture-of-Experts (DeepSeek-V3 / Kimi-K2 layers: MLA attention, "
                            f"{f.num_experts} routed experts top-{f.top_k} + {f.num_shared_experts} shared, "
                            f"first {f.n_dense_layers} layers dense), built with torchtitan",
            "vocab_size": info["vocab_size"], "total_params": counts["total"], "active_params": counts["active"],
            "active_matmul_params": counts["active_matmul"], "dim": f.dim, "n_layers": f.n_layers,
            "n_dense_layers": f.n_dense_layers, "num_experts": f.num_experts, "top_k": f.top_k,
            "num_shared_experts": f.num_shared_experts, "context_length": settings.seq_len,
        },
        "training": {
            "steps": final.step, "tokens_seen": tokens, "seq_len": settings.seq_len, "global_batch_size": global_batch,
            "optimizer": settings.optimizer.name, "lr": settings.optimizer.lr, "precision": settings.precision,
            "wall_time_s": round(wall, 3), "device_type": info["device_type"], "device_name": info["device_name"],
            "device_count": max((s["world_size"] for s in segs), default=info["world_size"]),
            "nodes": info.get("nodes", 1), "device_hours": round(device_seconds / 3600, 6),
            "launcher": settings.launcher, "segments": len(segs), "final_loss": rows[-1]["loss"],
            "first_loss": rows[0]["loss"], "tokens_per_s_per_device": sum(r["tokens_per_s_per_device"] for r in steady) / len(steady),
            "peak_memory_gib": max(r.get("memory_gib", 0.0) for r in rows),
            "torch_version": info.get("torch_version"), "torchtitan_version": info.get("torchtitan_version"),
        },
        "compute": compute_statistics(per_token, tokens, final.step, device_seconds, info, step_count.read(folder)),
        "checkpoint": {"final_step": final.step, "path": f"checkpoints/{final.name}",
                       "sha256": digest([(x["path"], x["sha256"]) for x in files]), "files": files,
                       "kept": [_kept(step, f) for step, f in sorted(digests.items())]},
        "projection": {"planned_tokens": planned_tokens, "planned_flops": planned_tokens * per_token["total"]},
    })


ARCHITECTURE_METHOD = ("6 x active matmul parameters x tokens + attention (6 x layers x seq_len x heads x (qk_dim + v_dim) "
                       "per token, causal attention at the full square); europa_model/flops.py")
ARCHITECTURE_UNCERTAINTY = (
    "Exact for what it counts, given the architecture: every matmul a token causes (2 FLOPs per multiply-add; backward "
    "twice the forward) and the attention scores and values. Not counted: element-wise work (norms, activations, "
    "softmax, routing, the optimizer), small against the matmuls for large models, and activation recomputation (the "
    "guidelines exclude it). Checked against the counted operations (b).")
COUNTED_METHOD = ("torch.utils.flop_counter.FlopCounterMode over the forward and backward of the job's first optimizer "
                  "step (every micro-batch, summed over all ranks, in the training process), with a torch._grouped_mm "
                  "formula for the MoE experts, times the steps")
COUNTED_UNCERTAINTY = (
    "Counts the matmul-like operations actually dispatched (mm, addmm, bmm, grouped mm, attention kernels) from their "
    "shapes; element-wise work and the optimizer are not counted; activation recomputation is counted apart and "
    "excluded. One step stands for all: every step has the same shapes, and MoE routing changes which experts run, "
    "not how many token-expert products there are.")
HARDWARE_METHOD = ("devices x wall seconds of the training processes (start-up, data loading and checkpointing "
                   "included) x the device's peak theoretical FLOP/s: the guidelines' hardware-based N x L x H with "
                   "the utilisation U set to 1")
HARDWARE_UNCERTAINTY = (
    "An upper bound, not an estimate: no run computes at its peak every second. The implied utilisation (a) / (c) is "
    "the average fraction of the peak the run achieved; above 100% is impossible and means (a) or the peak is wrong. "
    "Peak: the datasheet's dense bf16 figure for a GPU, or for a CPU cores x clock x FLOPs per cycle as read from the "
    "machine (an upper bound unless the CPU boosts above the clock it reports).")


def compute_statistics(per_token: dict[str, int], tokens: int, steps: int, device_seconds: float, info: dict,
                       count: dict | None) -> dict:
    """The record's compute part: (a) reported, (b) its check, (c) the bound and the utilisation (a) / (c)."""
    flops_a = per_token["total"] * tokens
    out: dict = {"architecture": {
        "flops": flops_a, "flops_per_token": per_token["total"], "flops_per_token_matmul": per_token["matmul"],
        "flops_per_token_attention": per_token["attention"], "flops_attention": per_token["attention"] * tokens,
        "tokens": tokens, "method": ARCHITECTURE_METHOD, "uncertainty": ARCHITECTURE_UNCERTAINTY}}
    if count is None:
        out["not_counted"] = ("no flop_count.json in the job folder: the job's first step ran under an earlier version "
                              "of the pipeline (rerun the pretrain stage with --force to count it)")
    elif "skipped" in count:
        out["not_counted"] = count["skipped"]
    else:
        flops_b = count["flops_per_step"] * steps
        out["counted"] = {
            "flops": flops_b, "flops_per_step": count["flops_per_step"], "counted_step": count["step"], "steps": steps,
            "tokens_per_step": count["tokens_per_step"], "by_operation": count["by_operation"],
            "recomputed_flops_per_step": count["recomputed_flops_per_step"],
            "ratio_to_architecture": flops_b / flops_a if flops_a else 0.0, "method": COUNTED_METHOD,
            "uncertainty": COUNTED_UNCERTAINTY}
    peak = info.get("peak_flops_per_device")
    if "peak_flops_inputs" not in info:
        out["no_hardware_bound"] = ("job_info.json records no theoretical peak (written by an earlier version of the "
                                    "pipeline); rerun the pretrain stage with --force")
    elif not peak:
        out["no_hardware_bound"] = info.get("peak_flops_source") or "no peak FLOP/s known for the device"
    else:
        bound = device_seconds * float(peak)
        out["hardware"] = {
            "flops": bound, "device_seconds": round(device_seconds, 3), "peak_flops_per_device": float(peak),
            "peak_source": info["peak_flops_source"], "implied_utilisation": flops_a / bound if bound else float("inf"),
            "method": HARDWARE_METHOD, "uncertainty": HARDWARE_UNCERTAINTY}
    return out
