"""The tokenizer stage: a language-balanced sample of the ingested corpus -> SentencePiece -> HF export -> report.

Units sample one language each (streamed, bounded); finalize trains on all samples (one job: SentencePiece
is not distributed), exports the Hugging Face files torchtitan reads, checks that both encode identically
and writes the fairness report. The optional parity gate fails the stage before anything is published.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pipeline import progress
from pipeline.fsutil import sha256_file
from pipeline.manifest import Manifest
from pipeline.stage import (InputError, Payload, StageContext, StageError, StageOutcome, Step, StepResults, Unit, UnitResult,
                            UnitStage)
from stages.tokenizer.config import TokenizerConfig
from stages.tokenizer.record import Balance, LanguageSample, ParityMerges, Sample, TokenizerModel, TokenizerRecord
from stages.tokenizer.sample import LanguageShare, WrittenSample, weighted_plan, write_language_sample

Ctx = StageContext[TokenizerConfig]


class SamplePayload(Payload):
    """One language's share of the sample: what it has, what it should give, and how many passes that takes."""

    lang: str
    available_chars: int
    target_chars: int
    passes: float


class SampleResult(UnitResult):
    """One language's sample as written (the record's per-language sample, plus the language)."""

    lang: str
    available_chars: int
    target_chars: int
    passes: float
    chars: int
    lines: int
    documents: int
    files: int
    files_read: int
    row_groups_read: int
    sha256: str


SAMPLES = Step("samples", SamplePayload, SampleResult)  # one language's sample per unit


def language_sample(share: LanguageShare, written: WrittenSample, path: Path) -> LanguageSample:
    """The record's entry for one language's sample file, as planned and as written."""
    return LanguageSample(available_chars=share.available_chars, target_chars=share.target_chars, passes=share.passes,
                          chars=written.chars, lines=written.lines, documents=written.documents, files=written.files,
                          files_read=written.files_read, row_groups_read=written.row_groups_read, sha256=sha256_file(path))


class TokenizerStage(UnitStage[TokenizerConfig]):
    name = "tokenizer"
    code_version = "3"
    config_model = TokenizerConfig
    steps = (SAMPLES,)

    def input_signature(self, ctx: Ctx) -> Any:
        path = ctx.settings.report.parallel_path
        if not path or not os.path.isdir(path):
            return None
        return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(path).iterdir() if p.is_file())

    def preflight(self, ctx: Ctx) -> None:
        """Balance settings that cannot be met are exit 2 before any text is read."""
        cfg = ctx.settings
        unknown = sorted(set(cfg.balance.weights) - set(ctx.config.run.languages))
        if unknown:
            raise InputError(f"stage tokenizer: [tokenizer.balance].weights names {', '.join(unknown)}, not in [run].languages "
                             f"({', '.join(ctx.config.run.languages)}); remove {'it' if len(unknown) == 1 else 'them'} or add "
                             "the language to the run")
        if cfg.balance.method != "none" and not (cfg.report.parallel_source or cfg.report.parallel_path):
            raise InputError(f"stage tokenizer: [tokenizer.balance].method = \"{cfg.balance.method}\" needs parallel report text to "
                             "measure parity on; set [tokenizer.report].parallel_path (a FLORES dev split) or parallel_source")

    def plan(self, ctx: Ctx, step: Step[Any, Any], done: StepResults) -> list[Unit]:
        cfg = ctx.settings
        self.preflight(ctx)
        per_lang = ctx.record("ingest").per_language
        available = {lang: per_lang[lang].kept_chars if lang in per_lang else 0 for lang in ctx.config.run.languages}
        empty = [lang for lang, chars in available.items() if chars == 0]
        if empty:
            raise InputError(
                f"stage tokenizer: no ingested text for {', '.join(empty)} (ingest kept 0 documents); add sources for "
                f"{'it' if len(empty) == 1 else 'them'} or remove {'it' if len(empty) == 1 else 'them'} from [run].languages"
            )
        shares = weighted_plan(available, cfg.sample, cfg.balance.weights)
        self._check_memory(cfg, sum(s.target_chars for s in shares.values()))
        return [SAMPLES.unit(f"sample-{lang}", SamplePayload(lang=lang, available_chars=s.available_chars,
                                                             target_chars=s.target_chars, passes=s.passes))
                for lang, s in shares.items()]

    def run_unit(self, ctx: Ctx, unit: Unit, out_dir: Path) -> SampleResult:
        p = SAMPLES.payload_of(unit)
        share = LanguageShare(p.lang, p.available_chars, p.target_chars, p.passes)
        files = sorted((ctx.upstream_dir("ingest") / "data" / p.lang).glob("part-*.parquet"))
        written = write_language_sample(files, share, ctx.config.run.seed, ctx.settings.sample.max_line_chars,
                                        out_dir / "sample.txt")
        return SampleResult(lang=p.lang, **language_sample(share, written, out_dir / "sample.txt").model_dump())

    def unit_work(self, unit: Unit, result: Any) -> tuple[float, str]:
        return float(result.chars) / 1e6, "M chars"

    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        from stages.tokenizer.hf_export import check_equivalence, export_hf
        from stages.tokenizer.report import ReportMeta, fairness, write_reports
        from stages.tokenizer.train import special_tokens

        cfg = ctx.settings
        results = SAMPLES.results(done)
        texts, description, parallel, missing = self._evaluation_text(ctx, cfg)
        samples = {results[uid].lang: ctx.unit_dir(SAMPLES.name, uid) / "sample.txt" for uid in sorted(results)}
        sample_stats = {r.lang: LanguageSample.model_validate(r.model_dump(include=set(LanguageSample.model_fields)))
                        for r in results.values()}
        model, sentences, metrics, sample_stats, balance = self._balance(ctx, cfg, samples, sample_stats, texts, parallel,
                                                                         out_dir)
        export_hf(model, out_dir)
        mismatches = check_equivalence(model, out_dir / "tokenizer.json", [t for d in texts.values() for t in d.values()])
        if mismatches:
            raise StageError(f"stage tokenizer: the Hugging Face export encodes {len(mismatches)} text(s) differently from "
                             f"the SentencePiece model, e.g. {mismatches[0][1][:80]!r}; this is a bug in hf_export.py")
        write_reports(metrics, ReportMeta(model_type=cfg.model_type, vocab_size=cfg.vocab_size, evaluation_text=description,
                                          max_parity=cfg.report.max_parity, missing_languages=missing), out_dir)

        max_parity = cfg.report.max_parity
        over = {lang: m.parity for lang, m in metrics.items() if max_parity and m.parity is not None and m.parity > max_parity}
        if over:
            worst = ", ".join(f"{lang} {v:.2f}" for lang, v in sorted(over.items(), key=lambda kv: -kv[1]))
            raise StageError(f"stage tokenizer: parity gate failed: {worst} exceed [tokenizer.report].max_parity = "
                             f"{cfg.report.max_parity}; raise vocab_size or the sample budget for these languages, or relax the gate")

        from stages.tokenizer.memory import GB, estimate_peak_bytes

        parities = {lang: m.parity for lang, m in metrics.items() if m.parity is not None}
        total_chars = sum(s.chars for s in sample_stats.values())
        statistics = TokenizerRecord(
            sample=Sample(policy=cfg.sample.policy, budget_chars=cfg.sample.budget_chars, max_passes=cfg.sample.max_passes,
                          per_language=sample_stats, total_chars=total_chars,
                          total_lines=sum(s.lines for s in sample_stats.values()), memory_budget_gb=cfg.memory_budget_gb,
                          estimated_peak_gb=round(estimate_peak_bytes(cfg.model_type, cfg.vocab_size, total_chars) / GB, 2),
                          input_sentence_size=sentences),
            model=TokenizerModel(type=cfg.model_type, vocab_size=cfg.vocab_size, byte_fallback=True, normalization="identity",
                                 special_tokens=["<unk>", "<s>", "</s>", "<pad>", *special_tokens(cfg)]),
            evaluation_text=description,
            hf_equivalence_checked_texts=sum(len(t) for t in texts.values()),
            metrics=metrics,
            missing_languages=missing,
            balance=balance,
            fairness=fairness(metrics),
        )
        summary = {"vocab": cfg.vocab_size, "languages": len(metrics), "sample MB": round(statistics.sample.total_chars / 1e6, 2)}
        if parities:
            worst = max(parities, key=parities.__getitem__)
            summary["worst parity"] = f"{worst} {parities[worst]:.2f}"
        return StageOutcome(statistics=statistics, summary=summary)

    def _balance(self, ctx: Ctx, cfg: TokenizerConfig, samples: dict[str, Path], stats: dict[str, LanguageSample],
                 texts: dict[str, dict[str, str]], parallel: bool, out_dir: Path):
        """Train on the planned sample; with parity-weights retrain on re-weighted samples (stages/tokenizer/
        balance.py) and keep the best round's tokenizer in out_dir. Returns (model, input_sentence_size, metrics,
        the kept round's sample, the Balance record)."""
        import shutil

        from stages.tokenizer.balance import Trained, parity_weight_rounds
        from stages.tokenizer.report import measure

        bal = cfg.balance
        iterate = bal.weights_rounds
        available = {lang: s.available_chars for lang, s in stats.items()}

        def train(rnd: int, targets: dict[str, int]) -> Trained:
            folder = ctx.work_dir / f"balance-{rnd}" if iterate else out_dir
            folder.mkdir(parents=True, exist_ok=True)
            round_stats, round_samples = stats, samples
            if rnd:
                round_stats, round_samples = {}, {}
                for lang in sorted(targets):
                    share = LanguageShare(lang, available[lang], targets[lang], targets[lang] / available[lang])
                    files = sorted((ctx.upstream_dir("ingest") / "data" / lang).glob("part-*.parquet"))
                    path = folder / f"{lang}.txt"
                    written = write_language_sample(files, share, ctx.config.run.seed + rnd, cfg.sample.max_line_chars, path)
                    round_stats[lang] = language_sample(share, written, path)
                    round_samples[lang] = path
            model, sentences = self._train(ctx, cfg, list(round_samples.values()), round_stats, folder)
            return Trained(model, measure(model, texts, cfg.report.reference_language, parallel),
                           (sentences, round_stats, round_samples))

        result = parity_weight_rounds({lang: s.target_chars for lang, s in stats.items()}, available,
                                      cfg.sample.budget_chars, cfg.sample.max_passes, bal, cfg.report.reference_language,
                                      train, iterate,
                                      note=lambda msg: progress.note(self.name, msg))
        kept = result.kept
        model, metrics = kept.model, kept.metrics
        sentences, kept_stats, kept_samples = kept.extra
        merges = None
        if bal.parity_merges:
            model, metrics, merges = self._parity_merges(ctx, cfg, kept, kept_samples, texts, parallel)
        if iterate or merges is not None:
            for suffix in (".model", ".vocab"):
                if model.with_suffix(suffix).exists():
                    shutil.copyfile(model.with_suffix(suffix), out_dir / f"tokenizer{suffix}")
            model = out_dir / "tokenizer.model"
        balance = Balance(method=bal.method, weights=dict(sorted(bal.weights.items())),
                          target_parity=bal.target_parity if bal.method != "none" else None,
                          strength=bal.strength if iterate else None,
                          rounds=result.rounds, chosen_round=result.chosen, stopped=result.stopped, merges=merges)
        return model, sentences, metrics, kept_stats, balance

    def _parity_merges(self, ctx: Ctx, cfg: TokenizerConfig, kept, samples: dict[str, Path], texts: dict[str, dict[str, str]],
                       parallel: bool):
        """Relearn the kept model's merges parity-aware on its own sample; (model, metrics, ParityMerges record)."""
        from stages.tokenizer.parity_bpe import train_parity_bpe
        from stages.tokenizer.report import fairness, measure

        dev = {lang: [docs[k] for k in sorted(docs)] for lang, docs in texts.items()}
        folder = ctx.work_dir / "parity-merges"
        progress.note(self.name, f"learning parity-aware BPE merges (worst parity above {cfg.balance.target_parity}) "
                                 f"on {len(samples)} languages")
        try:
            trained = train_parity_bpe(samples, dev, kept.model, folder / "tokenizer.model", cfg.balance.target_parity,
                                       cfg.report.reference_language, note=lambda msg: progress.note(self.name, msg))
        except ValueError as e:
            raise StageError(f"stage tokenizer: [tokenizer.balance].method = \"{cfg.balance.method}\": {e}; give every "
                             "language of the run parallel report text ([tokenizer.report])") from None
        metrics = measure(trained.model, texts, cfg.report.reference_language, parallel)
        record = ParityMerges(merges=trained.merges, target_parity=cfg.balance.target_parity, chosen_for=trained.chosen_for,
                              sentencepiece_max_parity=fairness(kept.metrics).max_parity, seconds=trained.seconds)
        return trained.model, metrics, record

    def _check_memory(self, cfg: TokenizerConfig, chars: int) -> None:
        """Refuse, before any text is read, a sample whose training would not fit the memory budget."""
        from stages.tokenizer.memory import GB, affordable_chars, estimate_peak_bytes

        need = estimate_peak_bytes(cfg.model_type, cfg.vocab_size, chars)
        if cfg.balance.parity_merges:
            merges_need = estimate_peak_bytes("parity-merges", cfg.vocab_size, chars)
            if merges_need > cfg.memory_budget_gb * GB:
                fit = affordable_chars("parity-merges", cfg.vocab_size, cfg.memory_budget_gb * GB)
                raise StageError(f"stage tokenizer: parity-aware merges on the planned {chars:,}-character sample need about "
                                 f"{merges_need / GB:,.1f} GB (stages/tokenizer/memory.py), more than [tokenizer].memory_budget_gb "
                                 f"= {cfg.memory_budget_gb:g}; lower [tokenizer.sample].budget_chars to at most {fit:,}, raise "
                                 "memory_budget_gb, or use method = \"parity-weights\"")
        if need <= cfg.memory_budget_gb * GB:
            return
        fit = affordable_chars(cfg.model_type, cfg.vocab_size, cfg.memory_budget_gb * GB)
        lower = (f"or lower [tokenizer.sample].budget_chars to at most {fit:,}" if fit >= 1_000 else
                 "or lower [tokenizer].vocab_size (not even its fixed part fits)")
        raise StageError(f"stage tokenizer: SentencePiece {cfg.model_type} with {cfg.vocab_size:,} pieces on the planned "
                         f"{chars:,}-character sample needs about {need / GB:,.1f} GB (estimated by stages/tokenizer/memory.py), "
                         f"more than [tokenizer].memory_budget_gb = {cfg.memory_budget_gb:g}; raise memory_budget_gb to what "
                         f"the machine running the stage has, {lower}")

    def _train(self, ctx: Ctx, cfg: TokenizerConfig, samples: list[Path], stats: dict[str, LanguageSample],
               out_dir: Path) -> tuple[Path, int]:
        """(model, input_sentence_size): SentencePiece loads at most the lines the memory budget allows."""
        from stages.tokenizer.memory import GB, input_sentence_size
        from stages.tokenizer.train import VocabularyTooLarge, train_sentencepiece

        lines = sum(s.lines for s in stats.values())
        chars = sum(s.chars for s in stats.values())
        sentences = input_sentence_size(cfg.model_type, cfg.vocab_size, cfg.memory_budget_gb * GB, chars / max(lines, 1),
                                        cfg.max_sentences)
        loaded = f"{lines:,} lines" if sentences >= lines else f"{sentences:,} of {lines:,} lines (a random subset)"
        progress.note(self.name, f"training SentencePiece {cfg.model_type} ({cfg.vocab_size:,} pieces) on {loaded}")
        try:
            return train_sentencepiece(samples, out_dir / "tokenizer", cfg, ctx.config.run.seed, sentences), sentences
        except VocabularyTooLarge as e:
            raise StageError(f"stage tokenizer: [tokenizer].vocab_size = {e.asked} is more than the sample supports "
                             f"(at most {e.maximum}); lower vocab_size or raise [tokenizer.sample].budget_chars") from None

    def _evaluation_text(self, ctx: Ctx, cfg: TokenizerConfig):
        """(texts per language, description, whether parallel, languages without text): parallel text if
        configured, else a slice of the ingested corpus (no parity then)."""
        from stages.tokenizer.report import parallel_from_flores, parallel_from_ingest, sample_from_ingest

        languages = ctx.config.run.languages
        data_dir = ctx.upstream_dir("ingest") / "data"
        missing: list[str] = []
        if cfg.report.parallel_source:
            texts = parallel_from_ingest(data_dir, cfg.report.parallel_source, languages)
            missing = [lang for lang, t in texts.items() if not t]
            if len(missing) == len(languages):
                raise StageError(f"stage tokenizer: [tokenizer.report].parallel_source = {cfg.report.parallel_source!r} "
                                 f"matches no ingested documents; use the name of an [[ingest.sources]] entry")
            description, parallel = f"ingest source {cfg.report.parallel_source!r} (parallel)", True
        elif cfg.report.parallel_path:
            if not os.path.isdir(cfg.report.parallel_path):
                raise StageError(f"stage tokenizer: [tokenizer.report].parallel_path {cfg.report.parallel_path} is not a folder; "
                                 f"point it at a FLORES-200 split folder (e.g. flores200/devtest)")
            texts, missing = parallel_from_flores(Path(cfg.report.parallel_path), languages)
            description, parallel = f"{cfg.report.parallel_path} (parallel)", True
        else:
            texts, description, parallel = sample_from_ingest(data_dir, languages), "ingested documents (not parallel: no parity)", False
        return {lang: t for lang, t in texts.items() if t}, description, parallel, missing

    def summary_markdown(self, manifest: Manifest) -> str:
        s = TokenizerRecord.model_validate(manifest.statistics)
        lines = [f"# tokenizer: {s.model.type} {s.model.vocab_size:,} pieces", "",
                 f"Evaluated on {s.evaluation_text}.", "", "| language | sample chars | passes | parity | fertility |", "|---|---:|---:|---:|---:|"]
        for lang, m in s.metrics.items():
            smp = s.sample.per_language.get(lang)
            chars, passes = (smp.chars, smp.passes) if smp else (0, 0.0)
            parity = "n/a" if m.parity is None else f"{m.parity:.3f}"
            lines.append(f"| {lang} | {chars:,} | {passes:.2f} | {parity} | {m.fertility:.3f} |")
        f = s.fairness
        if f is not None and f.parity_gini is not None:
            lines += ["", f"Worst parity {f.worst_language} {f.max_parity:.3f}; Gini of the per-language token counts "
                          f"{f.parity_gini:.3f}; mean fertility {f.mean_fertility:.3f}."]
        return "\n".join(lines) + "\n"
