"""A unit stage whose units do nothing (or sleep a few milliseconds): what the orchestration costs by itself.

bench/orchestration_scale_bench.py registers it in the place of the first stage and runs it through the real
executor, the Prefect mapper and a real Prefect server; its units travel to workers with their context, so the
workers need only find this module (bench/ on their PYTHONPATH).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field

from pipeline.manifest import Manifest
from pipeline.records import Record
from pipeline.stage import Payload, StageContext, StageOutcome, Step, StepResults, Unit, UnitResult, UnitStage

NAME = "ingest"  # the registry's first stage: nothing upstream


class NoopConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    units: int = Field(ge=1)
    sleep_ms: float = Field(0.0, ge=0)


class NoopRecord(Record):
    units: int
    checksum: int


class NoopPayload(Payload):
    index: int


class NoopResult(UnitResult):
    index: int


WORK = Step("work", NoopPayload, NoopResult)
Ctx = StageContext[NoopConfig]


class NoopStage(UnitStage[NoopConfig]):
    name = NAME
    code_version = "1"
    config_model = NoopConfig
    steps = (WORK,)

    def plan(self, ctx: Ctx, step: Step[Any, Any], done: StepResults) -> Iterator[Unit]:
        return (WORK.unit(f"u{i:07d}", NoopPayload(index=i)) for i in range(ctx.settings.units))

    def run_unit(self, ctx: Ctx, unit: Unit, out_dir: Path) -> NoopResult:
        if ctx.settings.sleep_ms:
            time.sleep(ctx.settings.sleep_ms / 1000)
        return NoopResult(index=WORK.payload_of(unit).index)

    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        results = WORK.results(done)
        checksum = sum(r.index for r in results.values())  # every unit's result read back once
        (out_dir / "units.txt").write_text(f"{len(results)} {checksum}\n", encoding="utf-8")
        return StageOutcome(statistics=NoopRecord(units=len(results), checksum=checksum), summary={"units": len(results)})

    def summary_markdown(self, manifest: Manifest) -> str:
        return f"{manifest.statistics['units']} no-op units\n"


def install() -> None:
    """Register the no-op stage (its config and record models too) as the first stage, for this process."""
    from pipeline import registry

    registry._PARTS[NAME] = registry.StageParts(f"{__name__}:NoopStage", f"{__name__}:NoopConfig",
                                                f"{__name__}:NoopRecord")
