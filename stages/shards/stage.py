"""The shards stage: every ingested document tokenized once, into bounded memory-mappable shards.

Units are (language x a run of its ingest Parquet files), sized to fill about one shard of `shard_bytes`
(1-4 GB at full scale: tens of thousands of shards, not hundreds of thousands); each tokenizes its documents
with the run's SentencePiece model, appends EOS, routes each document to train or validation by a hash of its
id (so the split does not depend on the order or the parallelism) and writes bounded shards into its unit
folder, hashing them as it writes. finalize moves the unit shards into train/<lang>/ and val/<lang>/, checks
that every moved file has the size its record says, writes index.json (shapes, dtype, checksums) and the
training mixture (mixture.json), and hands the checksums computed while writing to the manifest, so no shard
is read back (`europa verify` re-reads them on demand).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.manifest import Manifest
from pipeline.stage import Payload, StageContext, StageError, StageOutcome, Step, StepResults, Unit, UnitResult, UnitStage
from stages.shards.config import ShardsConfig

Ctx = StageContext[ShardsConfig]
SPLITS = ("train", "val")


class TokenizePayload(Payload):
    lang: str
    files: list[str]  # a run of the language's ingest Parquet parts
    val_threshold: int  # a document whose split hash is below it goes to validation


class ShardWritten(BaseModel):
    """A shard a unit wrote (europa_model/data/format.py's writer), with the checksums taken while writing."""

    model_config = ConfigDict(extra="forbid")

    split: str
    name: str
    dtype: str
    tokens: int
    docs: int
    ids_bytes: int
    sha256_bin: str
    sha256_idx: str
    sha256_ids: str


class TokenizeResult(UnitResult):
    lang: str
    shards: list[ShardWritten]


TOKENIZE = Step("tokenize", TokenizePayload, TokenizeResult)  # each unit: a run of one language's ingest files
EXACT_SPLIT_BELOW_DOCS = 1_000_000  # smaller languages get an exact validation count (read their ids once)
DEFAULT_BYTES_PER_TOKEN = 4.0  # for sizing units when the tokenizer measured none for a language
SHARD_FIELDS = ("dtype", "tokens", "docs", "ids_bytes", "sha256_bin", "sha256_idx", "sha256_ids")  # index.json, per shard


class ShardsStage(UnitStage[ShardsConfig]):
    name = "shards"
    code_version = "2"
    config_model = ShardsConfig
    steps = (TOKENIZE,)

    def plan(self, ctx: Ctx, step: Step[Any, Any], done: StepResults) -> list[Unit]:
        import pyarrow.parquet as pq

        from stages.shards.tokenize import split_hash

        cfg = ctx.settings
        ingest_dir = ctx.upstream_dir("ingest")
        units = []
        for lang in ctx.config.run.languages:
            files = sorted((ingest_dir / "data" / lang).glob("part-*.parquet"))
            counts = ctx.record("ingest").per_language.get(lang)
            n_docs = counts.kept if counts else 0
            if n_docs == 0:
                raise StageError(f"stage shards: ingest kept no documents for {lang}; fix its sources or remove it from [run].languages")
            threshold = int(cfg.val_fraction * 2**64)
            if cfg.val_fraction > 0 and n_docs < EXACT_SPLIT_BELOW_DOCS:
                # Exactly max(1, round(fraction x n)) validation documents: the smallest split hashes.
                hashes = sorted(split_hash(ctx.config.run.seed, i) for f in files for i in pq.read_table(f, columns=["id"]).column("id").to_pylist())
                k = min(max(1, round(cfg.val_fraction * len(hashes))), len(hashes) - 1)
                threshold = hashes[k - 1] + 1 if k > 0 else 0
            for i, group in enumerate(group_files(files, self._bin_bytes_per_file(ctx, lang, files), cfg.shard_bytes)):
                units.append(TOKENIZE.unit(f"{lang}-{i:05d}", TokenizePayload(lang=lang, files=[str(f) for f in group],
                                                                             val_threshold=threshold)))
        return units

    @staticmethod
    def _bin_bytes_per_file(ctx: Ctx, lang: str, files: list[Path]) -> list[float]:
        """Expected .bin bytes of each file's documents, without reading them: the language's kept bytes (ingest
        record) shared by file size, over the tokenizer's bytes per token for the language (its record)."""
        from europa_model.data.format import token_dtype

        tok = ctx.record("tokenizer")
        metric = tok.metrics.get(lang)
        bytes_per_token = (metric.bytes_per_token if metric is not None else None) or DEFAULT_BYTES_PER_TOKEN
        itemsize = token_dtype(tok.model.vocab_size).itemsize
        sizes = [f.stat().st_size for f in files]
        kept = ctx.record("ingest").per_language[lang].kept_bytes
        total = sum(sizes) or 1
        return [kept * size / total / bytes_per_token * itemsize for size in sizes]

    def run_unit(self, ctx: Ctx, unit: Unit, out_dir: Path) -> TokenizeResult:
        from stages.shards.tokenize import RoundTripError, tokenize_files

        p = TOKENIZE.payload_of(unit)
        try:
            records = tokenize_files(ctx.upstream_dir("tokenizer") / "tokenizer.model", [Path(f) for f in p.files],
                                     out_dir, seed=ctx.config.run.seed, val_threshold=p.val_threshold,
                                     shard_bytes=ctx.settings.shard_bytes)
        except RoundTripError as e:
            raise StageError(f"stage shards: {e}; retrain it (europa stage tokenizer --force)") from None
        return TokenizeResult.model_validate({"lang": p.lang, "shards": records})

    def unit_work(self, unit: Unit, result: Any) -> tuple[float, str]:
        return float(sum(r.tokens for r in result.shards)), "tokens"

    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        import sentencepiece as spm

        from stages.mixture import allocate
        from stages.shards.record import ShardsRecord

        cfg = ctx.settings
        results = TOKENIZE.results(done)
        sp = spm.SentencePieceProcessor(model_file=str(ctx.upstream_dir("tokenizer") / "tokenizer.model"))
        counters: dict[tuple[str, str], int] = defaultdict(int)
        per_lang: dict[str, dict[str, int]] = {lang: {f"{s}_{k}": 0 for s in SPLITS for k in ("tokens", "docs", "shards")}
                                               for lang in ctx.config.run.languages}
        shards, tokens_out, checksums = [], {}, {}
        for uid in sorted(results):
            r = results[uid]
            for shard_written in r.shards:
                rec = shard_written.model_dump()
                split, lang = rec["split"], r.lang
                dest = out_dir / split / lang / f"shard-{counters[(split, lang)]:05d}"
                counters[(split, lang)] += 1
                dest.parent.mkdir(parents=True, exist_ok=True)
                for ext in (".bin", ".idx", ".ids"):
                    os.replace(ctx.unit_dir(TOKENIZE.name, uid) / f"{rec['name']}{ext}", dest.with_suffix(ext))
                rel = dest.relative_to(out_dir).as_posix()
                shard = {"path": rel, "split": split, "lang": lang, **{k: rec[k] for k in SHARD_FIELDS}}
                check_written(dest, shard)
                shards.append(shard)
                tokens_out[f"{rel}.bin"] = rec["tokens"]
                checksums.update({f"{rel}{ext}": rec[f"sha256_{ext[1:]}"] for ext in (".bin", ".idx", ".ids")})
                st = per_lang[lang]
                st[f"{split}_tokens"] += rec["tokens"]
                st[f"{split}_docs"] += rec["docs"]
                st[f"{split}_shards"] += 1

        no_val = [lang for lang, s in per_lang.items() if cfg.val_fraction > 0 and s["val_docs"] == 0]
        index = {"format": 1, "vocab_size": sp.GetPieceSize(), "bos_id": sp.bos_id(), "eos_id": sp.eos_id(), "pad_id": sp.pad_id(),
                 "dtype": shards[0]["dtype"] if shards else None, "seed": ctx.config.run.seed,
                 "tokenizer_output_digest": ctx.upstream["tokenizer"].output_digest, "shards": shards}
        checksums["index.json"] = _write_json(out_dir / "index.json", index)

        available = {lang: s["train_tokens"] for lang, s in per_lang.items()}
        budget = cfg.mixture.total_tokens or sum(available.values())
        target = allocate(available, budget, cfg.mixture.policy, cfg.mixture.max_epochs, cfg.mixture.temperature)
        total_target = sum(target.values()) or 1
        mixture = {
            "policy": cfg.mixture.policy, "planned_tokens": budget, "allocated_tokens": total_target,
            "max_epochs": cfg.mixture.max_epochs, "temperature": cfg.mixture.temperature if cfg.mixture.policy == "temperature" else None,
            "languages": {lang: {"weight": round(target[lang] / total_target, 8), "tokens": target[lang], "available_tokens": available[lang],
                                 "expected_epochs": round(target[lang] / available[lang], 4) if available[lang] else 0.0}
                          for lang in sorted(target)},
        }
        if total_target < budget:
            mixture["note"] = (f"the epoch cap leaves {budget - total_target:,} of {budget:,} planned tokens unallocated: "
                               f"add data or raise max_epochs")
        checksums["mixture.json"] = _write_json(out_dir / "mixture.json", mixture)

        totals = {k: sum(s[k] for s in per_lang.values()) for k in ("train_tokens", "train_docs", "val_tokens", "val_docs")}
        statistics = ShardsRecord.model_validate({
            "totals": totals, "per_language": per_lang, "dtype": index["dtype"], "vocab_size": index["vocab_size"],
            "shards": len(shards), "mixture": mixture, "languages_without_validation": no_val})
        summary = {"train tokens": totals["train_tokens"], "val tokens": totals["val_tokens"], "shards": len(shards), "languages": len(per_lang)}
        return StageOutcome(statistics=statistics, summary=summary, tokens=tokens_out, checksums=checksums)

    def summary_markdown(self, manifest: Manifest) -> str:
        s = manifest.statistics
        lines = [f"# shards: {s['totals']['train_tokens']:,} train / {s['totals']['val_tokens']:,} validation tokens", "",
                 "| language | train tokens | val tokens | mixture weight | expected epochs |", "|---|---:|---:|---:|---:|"]
        for lang, st in s["per_language"].items():
            mx = s["mixture"]["languages"][lang]
            lines.append(f"| {lang} | {st['train_tokens']:,} | {st['val_tokens']:,} | {mx['weight']:.4f} | {mx['expected_epochs']:.2f} |")
        return "\n".join(lines) + "\n"


def group_files(files: list[Path], expected_bytes: list[float], shard_bytes: int) -> list[list[Path]]:
    """Runs of consecutive files whose expected output fits one shard (at least one file per run)."""
    groups: list[list[Path]] = []
    total = 0.0
    for f, size in zip(files, expected_bytes):
        if groups and total + size <= shard_bytes:
            groups[-1].append(f)
            total += size
        else:
            groups.append([f])
            total = size
    return groups


def check_written(prefix: Path, shard: dict[str, Any]) -> None:
    """The moved shard's files have the sizes its record implies (stats only: the checksums were computed while
    writing); a failure means the unit folder was damaged between its unit and finalize."""
    import numpy as np

    expected = {".bin": shard["tokens"] * np.dtype(shard["dtype"]).itemsize, ".idx": (shard["docs"] + 1) * 8, ".ids": shard["ids_bytes"]}
    for ext, size in expected.items():
        path = prefix.with_suffix(ext)
        actual = path.stat().st_size if path.exists() else None
        if actual != size:
            found = "is missing" if actual is None else f"has {actual} bytes"
            raise StageError(f"stage shards: {path} {found}, but its unit wrote {size}; rerun the stage from scratch "
                             f"(europa stage shards --force)")


def _write_json(path: Path, obj: Any) -> str:
    """Write `obj` as JSON and return the sha256 of the bytes written (the manifest's checksum, not re-read)."""
    data = (json.dumps(obj, indent=2) + "\n").encode("utf-8")
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()
