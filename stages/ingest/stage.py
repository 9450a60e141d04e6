"""The ingest stage: declared sources -> clean, deduplicated Parquet per language, with a full record.

Units are (language x source x a batch of input files); each runs the document chain and leaves its kept rows
(with dedup keys) and removed rows in its own folder. finalize deduplicates each language across all its
units, in unit order (so the first occurrence wins, deterministically), and writes bounded Parquet files.
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from pipeline.manifest import Manifest
from pipeline.stage import InputError, StageContext, StageError, StageOutcome, StepResults, Unit
from stages.ingest.config import IngestConfig
from stages.ingest.process import (EXACT_DUP, NEAR_DUP, InputFailed, add_dedup_keys, per_domain_bytes,
                                   process_inputs)
from stages.ingest.sources import list_inputs


DOCUMENTS = "documents"  # the step that runs the document chain over each unit of input files


class IngestStage:
    name = "ingest"
    code_version = "2"  # 2: block lists; crawled sources' bytes per domain before filtering
    steps = (DOCUMENTS,)

    # --- planning -----------------------------------------------------------------------------------
    def input_signature(self, ctx: StageContext) -> Any:
        """Size and modification time of every input file: a changed corpus makes the stage stale."""
        sig = []
        for source in self._settings(ctx).sources:
            for lang in self._languages(ctx, source):
                for ref in list_inputs(source, lang):
                    try:
                        st = os.stat(ref)
                        sig.append((ref, st.st_size, st.st_mtime_ns))
                    except OSError:
                        sig.append((ref, None, None))
            if source.opt_out.domains_file:
                st = os.stat(source.opt_out.domains_file) if os.path.exists(source.opt_out.domains_file) else None
                sig.append((source.opt_out.domains_file, st and st.st_size, st and st.st_mtime_ns))
        sig.extend(_blocklist_signature(self._settings(ctx)))
        return sig

    def plan(self, ctx: StageContext, step: str, done: StepResults) -> list[Unit]:
        settings = self._settings(ctx)
        if not settings.sources:
            raise StageError("stage ingest: no sources configured; add [[ingest.sources]] to the config")
        units = []
        for source in settings.sources:
            for lang in self._languages(ctx, source):
                refs = list_inputs(source, lang)
                if not refs:  # an empty unit records the problem in the manifest (or fails, per on_error)
                    units.append(Unit(f"{lang}-{source.name}-00000", {"lang": lang, "source": source.name, "refs": []}))
                for i in range(0, len(refs), settings.files_per_unit):
                    batch = refs[i : i + settings.files_per_unit]
                    units.append(Unit(f"{lang}-{source.name}-{i // settings.files_per_unit:05d}",
                                      {"lang": lang, "source": source.name, "refs": batch}))
        return units

    # --- one unit -----------------------------------------------------------------------------------
    def run_unit(self, ctx: StageContext, unit: Unit, out_dir: Path) -> dict[str, Any]:
        import pyarrow.parquet as pq

        from stages.ingest.schema import REJECTED_SCHEMA, UNIT_KEPT_SCHEMA, to_table

        settings = self._settings(ctx)
        source = next(s for s in settings.sources if s.name == unit.payload["source"])
        lang, refs = unit.payload["lang"], unit.payload["refs"]
        if not refs:
            message = f"source {source.name}: no input for language {lang} (path {source.path!r}); check the path or the source's languages"
            if settings.on_error == "fail":
                raise InputError(f"stage ingest: {message} (on_error = \"fail\")")
            return {"lang": lang, "source": source.name, "stats": {"problems": [
                {"source": source.name, "lang": lang, "input": source.path, "line": None, "reason": "no_inputs", "message": message}]}}
        try:
            kept, removed, stats = process_inputs(settings, source, lang, refs)
        except InputFailed as e:
            raise InputError(f"stage ingest: {e}") from None
        add_dedup_keys(kept, settings)
        pq.write_table(to_table(kept, UNIT_KEPT_SCHEMA), out_dir / "kept.parquet")
        pq.write_table(to_table(removed, REJECTED_SCHEMA), out_dir / "removed.parquet")
        return {"lang": lang, "source": source.name, "stats": stats.to_dict()}

    @staticmethod
    def unit_work(unit: Unit, result: dict[str, Any]) -> tuple[float, str]:
        return float(result["stats"].get("bytes_in", 0)) / 1e6, "MB"

    # --- merge, dedup, publish ----------------------------------------------------------------------
    def finalize(self, ctx: StageContext, done: StepResults, out_dir: Path) -> StageOutcome:
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        from stages.ingest.minhash import find_duplicates
        from stages.ingest.record import IngestRecord
        from stages.ingest.schema import DOCUMENT_SCHEMA, REJECTED_SCHEMA

        settings = self._settings(ctx)
        results = done[DOCUMENTS]
        dedup = settings.dedup
        per_lang: dict[str, dict[str, Any]] = {}
        per_source: dict[str, Counter] = defaultdict(Counter)
        per_domain: Counter = Counter()
        removed_by_reason: Counter = Counter()
        pii: Counter = Counter()
        blocked: Counter = Counter()
        crawled_domains: dict[str, Counter] = defaultdict(Counter)
        skipped: list[dict[str, Any]] = []
        rows_out: dict[str, int] = {}

        for lang in ctx.config.run.languages:
            unit_ids = sorted(u for u, r in results.items() if r["lang"] == lang)
            kept_tables, removed_tables = [], []
            lang_stats: Counter = Counter()
            lang_removed: Counter = Counter()
            for uid in unit_ids:
                st = results[uid]["stats"]
                skipped.extend(st.get("problems", []))
                if "docs_in" not in st:
                    continue
                udir = ctx.unit_dir(DOCUMENTS, uid)
                kept_tables.append(pq.read_table(udir / "kept.parquet"))
                removed_tables.append(pq.read_table(udir / "removed.parquet"))
                lang_stats.update({k: st[k] for k in ("docs_in", "bytes_in", "mojibake_fixed")})
                lang_removed.update(st["removed"])
                pii.update(st["pii"])
                blocked.update(st.get("blocklist", {}))
                crawled_domains[results[uid]["source"]].update(st.get("domain_bytes_in", {}))
                src = per_source[results[uid]["source"]]
                src.update({"docs_in": st["docs_in"], "bytes_in": st["bytes_in"]})
                src.update({f"removed_{k}": v for k, v in st["removed"].items()})

            kept = pa.concat_tables(kept_tables) if kept_tables else DOCUMENT_SCHEMA.empty_table()
            dup_of = np.full(kept.num_rows, -1, dtype=np.int64)
            reason = np.array([None] * kept.num_rows, dtype=object)
            if kept.num_rows and dedup.exact:
                first: dict[str, int] = {}
                for i, key in enumerate(kept.column("exact_key").to_pylist()):
                    j = first.setdefault(key, i)
                    if j != i:
                        dup_of[i], reason[i] = j, EXACT_DUP
            if kept.num_rows and dedup.near:
                alive = np.flatnonzero(dup_of < 0)
                sigs = np.stack([np.frombuffer(b, dtype=_sig_dtype(b, dedup.num_perm))
                                 for b in kept.column("signature").take(pa.array(alive)).to_pylist()])
                near = find_duplicates(sigs, dedup)
                for k in np.flatnonzero(near >= 0):
                    dup_of[alive[k]], reason[alive[k]] = alive[near[k]], NEAR_DUP
            is_dup = dup_of >= 0
            ids = kept.column("id").to_pylist() if kept.num_rows else []
            final = kept.filter(pa.array(~is_dup)).select(DOCUMENT_SCHEMA.names).cast(DOCUMENT_SCHEMA) if kept.num_rows else kept
            dups = kept.filter(pa.array(is_dup)).select(DOCUMENT_SCHEMA.names) if is_dup.any() else None
            lang_removed.update({EXACT_DUP: int((reason == EXACT_DUP).sum()), NEAR_DUP: int((reason == NEAR_DUP).sum())})
            lang_removed = +lang_removed

            rows_out.update(_write_parts(final, out_dir / "data" / lang, settings.max_rows_per_file, out_dir))
            if settings.keep_rejected:
                parts = [t.cast(REJECTED_SCHEMA) for t in removed_tables if t.num_rows]
                if dups is not None:
                    idx = np.flatnonzero(is_dup)
                    dups = dups.append_column("reason", pa.array(reason[idx].tolist(), pa.string()))
                    dups = dups.append_column("duplicate_of", pa.array([ids[j] for j in dup_of[idx]], pa.string()))
                    parts.append(dups.cast(REJECTED_SCHEMA))
                rejected = pa.concat_tables(parts) if parts else REJECTED_SCHEMA.empty_table()
                rows_out.update(_write_parts(rejected, out_dir / "rejected" / lang, settings.max_rows_per_file, out_dir))

            kept_rows = final.to_pylist() if final.num_rows else []
            domain_bytes = per_domain_bytes(kept_rows)
            per_domain.update(domain_bytes)
            kept_bytes = sum(r["n_bytes"] for r in kept_rows)
            for r in kept_rows:
                per_source[r["source"]].update({"kept": 1, "kept_bytes": r["n_bytes"]})
            removed_by_reason.update(lang_removed)
            per_lang[lang] = {
                "docs_in": lang_stats["docs_in"], "bytes_in": lang_stats["bytes_in"],
                "kept": final.num_rows, "kept_bytes": kept_bytes, "kept_chars": sum(r["n_chars"] for r in kept_rows),
                "kept_words": sum(r["n_words"] for r in kept_rows), "mojibake_fixed": lang_stats["mojibake_fixed"],
                "removed": dict(sorted(lang_removed.items())),
            }

        empty = [lang for lang, s in per_lang.items() if s["kept"] == 0]
        totals = {k: sum(s[k] for s in per_lang.values()) for k in ("docs_in", "bytes_in", "kept", "kept_bytes")}
        statistics = IngestRecord.model_validate({
            "totals": totals,
            "per_language": per_lang,
            "per_filter": _per_filter_counts(removed_by_reason),
            "per_domain_bytes": dict(sorted(per_domain.items(), key=lambda kv: (-kv[1], kv[0]))),
            "per_source": {name: self._source_record(settings, name, counts, crawled_domains[name])
                           for name, counts in sorted(per_source.items())},
            "pii_redactions": dict(sorted(pii.items())),
            "blocklists": _blocklist_records(settings, blocked),
            "languages_without_documents": empty,
        })
        from stages.ingest.report import write_report

        write_report(out_dir, statistics)  # after the parts: it reads its examples back from rejected/
        summary = {"languages": len(per_lang) - len(empty), "docs in": totals["docs_in"], "kept": totals["kept"],
                   "MB kept": round(totals["kept_bytes"] / 1e6, 2), "skipped inputs": len(skipped)}
        return StageOutcome(statistics=statistics, summary=summary, skipped=skipped, rows=rows_out)

    def summary_markdown(self, manifest: Manifest) -> str:
        s = manifest.statistics
        lines = [f"# ingest: {s['totals']['kept']:,} of {s['totals']['docs_in']:,} documents kept", "",
                 "| language | docs in | kept | kept MB | removed (top reasons) |", "|---|---:|---:|---:|---|"]
        for lang, st in s["per_language"].items():
            top = ", ".join(f"{k} {v}" for k, v in sorted(st["removed"].items(), key=lambda kv: -kv[1])[:3])
            lines.append(f"| {lang} | {st['docs_in']:,} | {st['kept']:,} | {st['kept_bytes'] / 1e6:.2f} | {top} |")
        lines += ["", "| filter | removed |", "|---|---:|"]
        lines += [f"| {k} | {v:,} |" for k, v in s["per_filter"].items() if v]
        if s.get("blocklists"):
            lines += ["", "| block list | entries | removed |", "|---|---:|---:|"]
            lines += [f"| {name} | {b['entries']:,} | {b['removed']:,} |" for name, b in s["blocklists"].items()]
        if manifest.skipped:
            lines += ["", f"**{len(manifest.skipped)} input problem(s) skipped**, e.g.: {manifest.skipped[0]['message']}"]
        if s["languages_without_documents"]:
            lines += ["", f"**No documents kept for:** {', '.join(s['languages_without_documents'])}"]
        return "\n".join(lines) + "\n"

    # --- helpers ------------------------------------------------------------------------------------
    @staticmethod
    def _settings(ctx: StageContext) -> IngestConfig:
        return ctx.settings  # type: ignore[return-value]

    @staticmethod
    def _languages(ctx: StageContext, source) -> list[str]:
        return [lang for lang in ctx.config.run.languages if lang in source.languages]

    @staticmethod
    def _source_record(settings: IngestConfig, name: str, counts: Counter, domain_bytes_in: Counter) -> dict[str, Any]:
        source = next(s for s in settings.sources if s.name == name)
        return {
            "domain_bytes_in": dict(sorted(domain_bytes_in.items(), key=lambda kv: (-kv[1], kv[0]))),
            "kind": source.kind, "category": source.category, "licence": source.licence, "homepage": source.homepage,
            "collected": source.collected, "repo": source.repo, "hf_config": source.hf_config,
            "opt_out": source.opt_out.model_dump(mode="json"), "counts": dict(sorted(counts.items())),
        }


def _per_filter_counts(removed: Counter) -> dict[str, int]:
    """Every known filter gets a row, zero included, so a filter that never fired is visible as such."""
    from stages.ingest.langid import REJECT_REASONS
    from stages.ingest.process import BLOCKLIST, EMPTY, OPT_OUT
    from stages.ingest.quality import QUALITY_REASONS

    names = [EMPTY, OPT_OUT, BLOCKLIST, *REJECT_REASONS, *QUALITY_REASONS, EXACT_DUP, NEAR_DUP]
    out = {n: int(removed.get(n, 0)) for n in names}
    out.update({k: int(v) for k, v in removed.items() if k not in out})
    return out


def _blocklist_signature(settings: IngestConfig) -> list[tuple]:
    """Size and modification time of every block list file: a new version of a list makes the stage stale."""
    from stages.ingest.blocklist import list_files

    sig = []
    for b in settings.blocklists:
        try:
            files = list_files(b.path)
        except ValueError as e:
            raise StageError(f"stage ingest: [[ingest.blocklists]] {b.name}: {e}") from None
        sig.extend((str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files)
    return sig


def _blocklist_records(settings: IngestConfig, removed: Counter) -> dict[str, Any]:
    """Per block list: where it was read, its version (sha256), its entries and the documents it removed."""
    from stages.ingest.blocklist import load

    out = {}
    for cfg in settings.blocklists:
        bl = load(cfg)
        out[cfg.name] = {"path": cfg.path, "description": cfg.description, "sha256": bl.sha256, "domains": len(bl.domains),
                         "urls": len(bl.urls), "entries": bl.entries, "removed": int(removed.get(cfg.name, 0))}
    return out


def _sig_dtype(b: bytes, num_perm: int):
    import numpy as np

    return np.uint32 if len(b) == 4 * num_perm else np.uint64


def _write_parts(table, folder: Path, max_rows: int, stage_dir: Path) -> dict[str, int]:
    """Bounded Parquet files part-00000.parquet, ... (at least one, possibly empty, per language)."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    rows = {}
    n = max(1, -(-table.num_rows // max_rows))
    for i in range(n):
        part = table.slice(i * max_rows, max_rows)
        path = folder / f"part-{i:05d}.parquet"
        pq.write_table(part, path, compression="zstd")
        rows[path.relative_to(stage_dir).as_posix()] = part.num_rows
    return rows
