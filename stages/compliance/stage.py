"""The compliance stage: the EU AI Act documents of a run, written from the run's records.

A `RunStage`: the documents are small and come from the upstream stages' typed records alone (the executor
loads and validates them), so one `run` does all the work (stages/compliance/generate.py). With
`[compliance] strict = true` the stage fails, before anything is published, while any value is open or any
declaration contradicts a record (both listed in open_items.md).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.manifest import Manifest
from pipeline.stage import RunStage, StageContext, StageError, StageOutcome
from stages.ai_act import SYSTEMIC_RISK_FLOPS
from stages.compliance.config import ComplianceConfig
from stages.compliance.record import ComplianceRecord, ComputeCheck, Contradiction, OpenItem

MAX_ITEMS_IN_ERROR = 8


class ComplianceStage(RunStage[ComplianceConfig]):
    name = "compliance"
    code_version = "2"
    config_model = ComplianceConfig

    def run(self, ctx: StageContext[ComplianceConfig], out_dir: Path) -> StageOutcome:
        from stages.compliance.annex_xi import systemic
        from stages.compliance.compute import compute_facts
        from stages.compliance.facts import Records
        from stages.compliance import release
        from stages.compliance.contradictions import contradictions
        from stages.compliance.generate import FormSchemaError, generate, write

        cfg = ctx.settings
        if cfg.strict:  # refuse before writing the release export (hours for a large model)
            _refuse_under_strict([], contradictions(Records.from_context(ctx)))
        release.ensure(ctx)  # the declared released form exists before the documents hash it
        rec = Records.from_context(ctx)
        try:
            bundle = generate(ctx.run_dir, cfg, rec)
        except FormSchemaError as e:
            raise StageError(f"stage compliance: {e}") from None
        if cfg.strict:
            _refuse_under_strict(bundle.open_items, bundle.contradictions)
        files = write(bundle, out_dir)
        comp = compute_facts(rec)
        applies, why = systemic(rec)
        statistics = ComplianceRecord(
            documents=[d.id for d in bundle.documents],
            files=files,
            open_items=[OpenItem(need=i.need, used_by=list(i.used_by)) for i in bundle.open_items],
            contradictions=[Contradiction(check=c.check, message=c.message, fix=c.fix) for c in bundle.contradictions],
            compute=ComputeCheck(training_flops=comp.training.value, projected_flops=comp.projected.value,
                                 threshold=SYSTEMIC_RISK_FLOPS, presumed_systemic_risk=applies, reason=why),
            strict=cfg.strict,
        )
        summary = {"documents": len(bundle.documents), "open items": len(bundle.open_items),
                   "contradictions": len(bundle.contradictions)}
        if comp.training.value is not None:
            from stages.compliance.numbers import sig2

            summary["training FLOP"] = sig2(comp.training.value)
        return StageOutcome(statistics=statistics, summary=summary)

    def summary_markdown(self, manifest: Manifest) -> str:
        s = ComplianceRecord.model_validate(manifest.statistics)
        lines = [f"# compliance: {len(s.documents)} documents, {len(s.open_items)} open item(s), "
                 f"{len(s.contradictions)} contradiction(s)", ""]
        lines += [f"- {f}" for f in s.files]
        if s.compute.training_flops is not None:
            verdict = "presumed systemic risk" if s.compute.presumed_systemic_risk else "below the 1e25 FLOP presumption"
            lines += ["", f"Training compute {s.compute.training_flops:.2e} FLOP: {verdict}."]
        if s.open_items:
            lines += ["", "Open items:"] + [f"- {i.need}" for i in s.open_items]
        if s.contradictions:
            lines += ["", "Contradictions:"] + [f"- {c.check}: {c.message}" for c in s.contradictions]
        return "\n".join(lines) + "\n"


def _refuse_under_strict(open_items: list, found: list) -> None:
    if not (open_items or found):
        return
    needs = [f"contradiction {c.check}: {c.message}" for c in found] + [i.need for i in open_items]
    more = f" (and {len(needs) - MAX_ITEMS_IN_ERROR} more)" if len(needs) > MAX_ITEMS_IN_ERROR else ""
    raise StageError(
        f"stage compliance: {len(open_items)} open item(s) and {len(found)} contradiction(s) "
        f"while [compliance] strict = true: {' | '.join(needs[:MAX_ITEMS_IN_ERROR])}{more}; provide or fix them "
        "(see open_items.md), or set strict = false to publish with them listed")
