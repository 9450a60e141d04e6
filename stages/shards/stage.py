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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.manifest import Manifest
from pipeline.stage import (InputError, Payload, StageContext, StageError, StageOutcome, Step, StepResults, Unit,
                            UnitResult, UnitStage)
from stages.shards.config import ShardsConfig
from stages.shards.index import IndexedShard, ShardIndex, ShardWritten
from stages.shards.record import (LanguageMixture, LanguageRehydration, LanguageSplit, Mixture, Rehydration,
                                  ShardsRecord, Totals)

Ctx = StageContext[ShardsConfig]


class TokenizePayload(Payload):
    lang: str
    files: list[str]  # a run of the language's ingest Parquet parts
    val_threshold: int  # a document whose split hash is below it goes to validation


class TokenizeResult(UnitResult):
    lang: str
    shards: list[ShardWritten]
    docs_added: int = 0  # by rehydration (stages/shards/tokenize.py: Rehydrated)
    tokens_added: int = 0
    docs_by_copies: dict[str, int] = {}


TOKENIZE = Step("tokenize", TokenizePayload, TokenizeResult)  # each unit: a run of one language's ingest files
EXACT_SPLIT_BELOW_DOCS = 1_000_000  # smaller languages get an exact validation count (read their ids once)
DEFAULT_BYTES_PER_TOKEN = 4.0  # for sizing units when the tokenizer measured none for a language


@dataclass
class SplitCount:
    tokens: int = 0
    docs: int = 0
    shards: int = 0


@dataclass
class LanguageCount:
    """One language's tokens, documents and shards per split, counted as finalize moves its shards."""

    train: SplitCount = field(default_factory=SplitCount)
    val: SplitCount = field(default_factory=SplitCount)

    def add(self, shard: ShardWritten) -> None:
        count = self.val if shard.split == "val" else self.train
        count.tokens += shard.tokens
        count.docs += shard.docs
        count.shards += 1

    def record(self) -> LanguageSplit:
        return LanguageSplit(train_tokens=self.train.tokens, train_docs=self.train.docs, train_shards=self.train.shards,
                             val_tokens=self.val.tokens, val_docs=self.val.docs, val_shards=self.val.shards)


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
        from stages.shards.tokenize import MissingClusterSizes, Rehydrated, RoundTripError, tokenize_files

        p = TOKENIZE.payload_of(unit)
        added = Rehydrated()
        try:
            records = tokenize_files(ctx.upstream_dir("tokenizer") / "tokenizer.model", [Path(f) for f in p.files],
                                     out_dir, seed=ctx.config.run.seed, val_threshold=p.val_threshold,
                                     shard_bytes=ctx.settings.shard_bytes,
                                     rehydration=ctx.settings.mixture.rehydration_table(), rehydrated=added)
        except RoundTripError as e:
            raise StageError(f"stage shards: {e}; retrain it (europa stage tokenizer --force)") from None
        except MissingClusterSizes as e:
            raise InputError(f"stage shards: {e}") from None
        return TokenizeResult(lang=p.lang, shards=records, docs_added=added.docs_added, tokens_added=added.tokens_added,
                              docs_by_copies={str(k): v for k, v in sorted(added.docs_by_copies.items())})

    def unit_work(self, unit: Unit, result: Any) -> tuple[float, str]:
        return float(sum(r.tokens for r in result.shards)), "tokens"

    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        import sentencepiece as spm

        from stages.mixture import allocate

        cfg = ctx.settings
        results = TOKENIZE.results(done)
        sp = spm.SentencePieceProcessor(model_file=str(ctx.upstream_dir("tokenizer") / "tokenizer.model"))
        counters: dict[tuple[str, str], int] = defaultdict(int)
        per_lang = {lang: LanguageCount() for lang in ctx.config.run.languages}
        shards: list[IndexedShard] = []
        tokens_out: dict[str, int] = {}
        checksums: dict[str, str] = {}
        for uid in sorted(results):
            r = results[uid]
            for written in r.shards:
                split, lang = written.split, r.lang
                dest = out_dir / split / lang / f"shard-{counters[(split, lang)]:05d}"
                counters[(split, lang)] += 1
                dest.parent.mkdir(parents=True, exist_ok=True)
                for ext in (".bin", ".idx", ".ids"):
                    os.replace(ctx.unit_dir(TOKENIZE.name, uid) / f"{written.name}{ext}", dest.with_suffix(ext))
                rel = dest.relative_to(out_dir).as_posix()
                shard = IndexedShard(path=rel, lang=lang, **written.model_dump(exclude={"name"}))
                check_written(dest, shard)
                shards.append(shard)
                tokens_out[f"{rel}.bin"] = written.tokens
                checksums.update({f"{rel}.bin": written.sha256_bin, f"{rel}.idx": written.sha256_idx,
                                  f"{rel}.ids": written.sha256_ids})
                per_lang[lang].add(written)

        no_val = [lang for lang, c in per_lang.items() if cfg.val_fraction > 0 and c.val.docs == 0]
        rehydration = _rehydration(cfg, results)
        index = ShardIndex(format=1, vocab_size=sp.GetPieceSize(), bos_id=sp.bos_id(), eos_id=sp.eos_id(), pad_id=sp.pad_id(),
                           dtype=shards[0].dtype if shards else None, seed=ctx.config.run.seed,
                           tokenizer_output_digest=ctx.upstream["tokenizer"].output_digest, shards=shards)
        checksums["index.json"] = _write_json(out_dir / "index.json", index.model_dump())

        available = {lang: c.train.tokens for lang, c in per_lang.items()}
        budget = cfg.mixture.total_tokens or sum(available.values())
        target = allocate(available, budget, cfg.mixture.policy, cfg.mixture.max_epochs, cfg.mixture.temperature)
        total_target = sum(target.values()) or 1
        mixture = Mixture(
            policy=cfg.mixture.policy, planned_tokens=budget, allocated_tokens=total_target, max_epochs=cfg.mixture.max_epochs,
            temperature=cfg.mixture.temperature if cfg.mixture.policy == "temperature" else None,
            languages={lang: LanguageMixture(weight=round(target[lang] / total_target, 8), tokens=target[lang],
                                             available_tokens=available[lang],
                                             expected_epochs=round(target[lang] / available[lang], 4) if available[lang] else 0.0)
                       for lang in sorted(target)},
        )
        if total_target < budget:  # assigned, so set: mixture.json and the record carry a note only then
            mixture.note = (f"the epoch cap leaves {budget - total_target:,} of {budget:,} planned tokens unallocated: "
                            f"add data or raise max_epochs")
        checksums["mixture.json"] = _write_json(out_dir / "mixture.json", mixture.model_dump(exclude_unset=True))

        counts = per_lang.values()
        totals = Totals(train_tokens=sum(c.train.tokens for c in counts), train_docs=sum(c.train.docs for c in counts),
                        val_tokens=sum(c.val.tokens for c in counts), val_docs=sum(c.val.docs for c in counts))
        statistics = ShardsRecord(
            totals=totals, per_language={lang: c.record() for lang, c in per_lang.items()}, dtype=index.dtype,
            vocab_size=index.vocab_size, shards=len(shards), mixture=mixture, languages_without_validation=no_val,
            rehydration=rehydration)
        summary = {"train tokens": totals.train_tokens, "val tokens": totals.val_tokens, "shards": len(shards), "languages": len(per_lang)}
        return StageOutcome(statistics=statistics, summary=summary, tokens=tokens_out, checksums=checksums)

    def summary_markdown(self, manifest: Manifest) -> str:
        s = ShardsRecord.model_validate(manifest.statistics)
        lines = [f"# shards: {s.totals.train_tokens:,} train / {s.totals.val_tokens:,} validation tokens", "",
                 "| language | train tokens | val tokens | mixture weight | expected epochs |", "|---|---:|---:|---:|---:|"]
        for lang, st in s.per_language.items():
            mx = s.mixture.languages[lang]
            lines.append(f"| {lang} | {st.train_tokens:,} | {st.val_tokens:,} | {mx.weight:.4f} | {mx.expected_epochs:.2f} |")
        return "\n".join(lines) + "\n"


def _rehydration(cfg: ShardsConfig, results: dict[str, TokenizeResult]) -> Rehydration | None:
    table = cfg.mixture.rehydration_table()
    if table is None:
        return None
    per: dict[str, LanguageRehydration] = {}
    for uid in sorted(results):
        r = results[uid]
        lr = per.setdefault(r.lang, LanguageRehydration(docs_added=0, tokens_added=0, docs_by_copies={}))
        lr.docs_added += r.docs_added
        lr.tokens_added += r.tokens_added
        for k, v in r.docs_by_copies.items():
            lr.docs_by_copies[k] = lr.docs_by_copies.get(k, 0) + v
    for lr in per.values():
        lr.docs_by_copies = dict(sorted(lr.docs_by_copies.items(), key=lambda kv: int(kv[0])))
    return Rehydration(table="fineweb-2" if cfg.mixture.rehydration == "fineweb-2" else "table",
                       rows=[list(r) for r in table], docs_added=sum(r.docs_added for r in per.values()),
                       tokens_added=sum(r.tokens_added for r in per.values()), per_language=dict(sorted(per.items())))


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


def check_written(prefix: Path, shard: IndexedShard) -> None:
    """The moved shard's files have the sizes its record implies (stats only: the checksums were computed while
    writing); a failure means the unit folder was damaged between its unit and finalize."""
    import numpy as np

    expected = {".bin": shard.tokens * np.dtype(shard.dtype).itemsize, ".idx": (shard.docs + 1) * 8, ".ids": shard.ids_bytes}
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
