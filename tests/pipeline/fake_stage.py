"""A two-step unit stage small enough to read at a glance, for testing the executor without any real stage.

Step `count`: one unit per word, which writes the word into its folder and counts its letters. Step `total`: one
unit, planned from every count result, which sums them. finalize writes the words and the total. Every unit it
runs is appended to `log`, so a test sees which units ran, in which order, and which a rerun skipped. The setting
`fail_at` makes the unit of that word fail; the environment (outside the fingerprint, so a rerun without it
resumes the same work) can make one die (FAKE_KILL_AT: SIGKILL), fail once with a transient error
(FAKE_FLAKY_AT), wait for a file to exist (FAKE_WAIT_FOR: a stage that is still running), or every count unit
take FAKE_SLOW_S seconds. `cli(argv)` is `europa` with the fake stage registered, for a config whose [ingest]
section is the fake stage's settings.
`install()` puts it into the registry in the place of the first stage, which has no upstream.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from pipeline.config import OrchestrationConfig, PipelineConfig, RunConfig
from pipeline.manifest import Manifest
from pipeline.records import Record
from pipeline.stage import Payload, StageContext, StageOutcome, Step, StepResults, Unit, UnitResult, UnitStage

NAME = "ingest"  # the registry's first stage: nothing upstream


class FakeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    words: list[str]
    log: str  # a file each unit run appends its id to
    fail_at: str | None = None
    malformed: str | None = None  # "payload" | "result": the stage breaks its own contract


class FakeRecord(Record):
    words: int
    letters: int


class WordPayload(Payload):
    word: str


class WordResult(UnitResult):
    word: str
    letters: int


class TotalPayload(Payload):
    letters: dict[str, int]  # word -> letters, from the count step's results


class TotalResult(UnitResult):
    letters: int


COUNT = Step("count", WordPayload, WordResult)
TOTAL = Step("total", TotalPayload, TotalResult)
Ctx = StageContext[FakeConfig]


class FakeStage(UnitStage[FakeConfig]):
    name = NAME
    code_version = "1"
    config_model = FakeConfig
    steps = (COUNT, TOTAL)

    def plan(self, ctx: Ctx, step: Step[Any, Any], done: StepResults) -> list[Unit]:
        if step is COUNT:
            if ctx.settings.malformed == "payload":
                return [Unit(w, {"wrd": w}) for w in ctx.settings.words]  # a dict, and the wrong key
            return [COUNT.unit(w, WordPayload(word=w)) for w in ctx.settings.words]
        counted = COUNT.results(done)
        return [TOTAL.unit("all", TotalPayload(letters={w: r.letters for w, r in counted.items()}))]

    def run_unit(self, ctx: Ctx, unit: Unit, out_dir: Path) -> Any:
        cfg = ctx.settings
        with open(cfg.log, "a", encoding="utf-8") as log:
            log.write(f"{unit.step}/{unit.id}\n")
        if unit.step == COUNT.name:
            word = COUNT.payload_of(unit).word
            if slow := os.environ.get("FAKE_SLOW_S"):
                time.sleep(float(slow))
            if wait_for := os.environ.get("FAKE_WAIT_FOR"):
                while not Path(wait_for).exists():
                    time.sleep(0.05)
            if word == os.environ.get("FAKE_KILL_AT"):
                os.kill(os.getpid(), signal.SIGKILL)
            if word == cfg.fail_at:
                raise ValueError(f"the word {word!r} is not allowed")
            if word == os.environ.get("FAKE_FLAKY_AT") and not (Path(cfg.log).with_suffix(".flaked")).exists():
                Path(cfg.log).with_suffix(".flaked").touch()
                raise ConnectionResetError("connection reset by peer")
            (out_dir / "word.txt").write_text(word, encoding="utf-8")
            if cfg.malformed == "result":
                return {"word": word, "letters": "many"}
            return WordResult(word=word, letters=len(word))
        return TotalResult(letters=sum(TOTAL.payload_of(unit).letters.values()))

    def unit_cost(self, unit: Unit) -> float:
        return float(len(unit.payload.word)) if isinstance(unit.payload, WordPayload) else 1.0

    def finalize(self, ctx: Ctx, done: StepResults, out_dir: Path) -> StageOutcome:
        counted, total = COUNT.results(done), TOTAL.results(done)["all"]
        (out_dir / "words.txt").write_text("\n".join(sorted(counted)) + "\n", encoding="utf-8")
        (out_dir / "total.txt").write_text(f"{total.letters}\n", encoding="utf-8")
        record = FakeRecord(words=len(counted), letters=total.letters)
        return StageOutcome(statistics=record, summary={"words": len(counted)})

    def summary_markdown(self, manifest: Manifest) -> str:
        return f"{manifest.statistics['words']} words\n"


def install() -> None:
    """Register the fake stage (and its config and record models) as the first stage, for this process."""
    from pipeline import registry

    registry._PARTS[NAME] = registry.StageParts(f"{__name__}:FakeStage", f"{__name__}:FakeConfig", f"{__name__}:FakeRecord")


def config(orchestration: dict[str, Any] | None = None, **settings: Any) -> PipelineConfig:
    o = OrchestrationConfig(**{"engine": "local", "retry_backoff_s": 0, **(orchestration or {})})
    return PipelineConfig(RunConfig(name="fake", languages=["en"]), o, {NAME: FakeConfig(**settings)}, None)


def cli(argv: list[str]) -> int:
    """`europa ARGV` with the fake stage registered (python -c "...; sys.exit(cli(sys.argv[1:]))" run --config F)."""
    from pipeline.cli import main

    install()
    return main(argv)


if __name__ == "__main__":  # python -m tests.pipeline.fake_stage RUN_DIR SETTINGS_JSON: one stage run, locked
    import json

    from pipeline.executor import execute_stage
    from pipeline.rundir import RunDir

    install()
    rd = RunDir(sys.argv[1])
    with rd.lock("fake stage"):
        execute_stage(rd, config(**json.loads(sys.argv[2])), NAME)
