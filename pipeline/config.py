"""The run configuration: one TOML file, typed, with errors that name the key and the fix.

`[run]` and `[orchestration]` belong to the core; every other section belongs to a stage and is validated by
that stage's own `Config` model (torchtitan style), so the core never needs to know a stage's settings.
Relative paths in the file are resolved against the file's folder, so a config means the same thing
whatever the working directory.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from pipeline.errors import UsageError
from pipeline.languages import EU_LANGUAGE_CODES
from pipeline.registry import STAGE_NAMES, stage_config_model

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = REPO_ROOT / "configs" / "demo.toml"


class ConfigError(UsageError):
    """A configuration problem, already phrased for the user (file, key, what is allowed)."""


# the largest seed every consumer takes: SentencePiece and NumPy take an unsigned 32-bit seed
MAX_SEED = 2**32 - 1


class StrictModel(BaseModel):
    """Base for every config section: unknown keys are errors, types are not coerced from strings, and no
    number is inf or nan (TOML has both; no setting means either)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False)


def resolve_config_path(v: str | None, info: ValidationInfo) -> str | None:
    """A field validator's view of a path in the config: relative paths are relative to the config file."""
    if v is None or "://" in v:
        return v
    base = (info.context or {}).get("base_dir")
    p = Path(v).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return os.path.normpath(p) if p.is_absolute() else v


def check_languages(codes: list[str]) -> list[str]:
    """Validate ISO 639-1 codes against the 24 EU languages; "all" expands to all of them."""
    if codes == ["all"]:
        return list(EU_LANGUAGE_CODES)
    unknown = [c for c in codes if c not in EU_LANGUAGE_CODES]
    if unknown:
        raise ValueError(
            f"unknown language code(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(EU_LANGUAGE_CODES)} (or [\"all\"])"
        )
    if len(set(codes)) != len(codes):
        raise ValueError("a language is listed twice")
    return codes


class RunConfig(StrictModel):
    name: str = Field("demo", pattern=r"^[A-Za-z0-9_.-]+$", description="Run name; default run directory is runs/<name>.")
    languages: list[str] = Field(default_factory=lambda: ["all"], min_length=1,
                                 description='ISO 639-1 codes, or ["all"] for the 24 EU languages.')
    seed: int = Field(1234, ge=0, le=MAX_SEED, description="Seed for every sampling decision in the run (0 to 2^32-1).")

    @field_validator("languages")
    @classmethod
    def _known_languages(cls, v: list[str]) -> list[str]:
        return check_languages(v)


class OrchestrationConfig(StrictModel):
    engine: Literal["prefect", "local"] = Field(
        "prefect", description="prefect: stages run as Prefect flows; local: the same stage code in-process, no Prefect (debugging)."
    )
    task_runner: Literal["threads", "processes", "dask"] = Field(
        "threads",
        description="How a stage's units run in parallel (engine prefect): threads or processes on this machine, "
        "or dask: Dask workers (prefect-dask), a local cluster or the scheduler at dask_address.",
    )
    max_workers: int = Field(
        2, ge=1,
        description="Parallel units at most on this machine; with task_runner dask and no dask_address, the local "
        "Dask cluster's worker processes (1 thread each).",
    )
    retries: int = Field(
        2, ge=0, description="Tries again after a transient failure of a unit (a time-out, a dropped connection, a "
        "lost Dask worker), with doubling delays; counted in the manifest. An ingest input still failing on the last try "
        "is skipped with the reason unreachable (on_error = \"fail\": exit 2). Other failures are never retried.")
    retry_backoff_s: float = Field(5.0, ge=0, description="Delay before the first retry; each further one doubles it.")
    server_timeout_s: float = Field(
        60.0, ge=5, description="engine prefect: how long the Prefect server may not answer during a run before the "
        "run stops, in one line, keeping every finished unit for the rerun (a temporary server that exits stops it "
        "at once).")
    dask_address: str | None = Field(
        None, min_length=1,
        description="Address of a running Dask scheduler (e.g. tcp://10.1.2.3:8786 from a dask-jobqueue "
        "SLURMCluster; see docs/scaling.md); only with task_runner dask. Unset: a local Dask cluster.",
    )

    @field_validator("dask_address")
    @classmethod
    def _address_needs_dask(cls, v: str | None, info: ValidationInfo) -> str | None:
        runner = info.data.get("task_runner")
        if v is not None and runner != "dask":
            raise ValueError(f'only used with task_runner = "dask" (task_runner is "{runner}"); set it or remove dask_address')
        return v


CORE_SECTIONS = {"run": RunConfig, "orchestration": OrchestrationConfig}


class PipelineConfig:
    """The resolved configuration: core sections as models, stage sections as their stages' models."""

    def __init__(self, run: RunConfig, orchestration: OrchestrationConfig, stages: dict[str, BaseModel], source: Path | None):
        self.run = run
        self.orchestration = orchestration
        self.stages = stages
        self.source = source

    def section(self, stage: str) -> BaseModel:
        return self.stages[stage]

    def to_dict(self) -> dict[str, Any]:
        """JSON/TOML-able form (paths already absolute); what run.toml stores."""
        out: dict[str, Any] = {
            "run": self.run.model_dump(mode="json"),
            "orchestration": self.orchestration.model_dump(mode="json", exclude_none=True),
        }
        for name, model in self.stages.items():
            out[name] = model.model_dump(mode="json", exclude_none=True)
        return out


def _format_validation_error(err: ValidationError, section: str, where: str) -> str:
    """First error only, as `file: [section.key.sub]: problem; fix` — one line the user can act on."""
    e = err.errors()[0]
    loc = ".".join(str(p) for p in (section, *e["loc"]) if p != "__root__")
    kind, msg = e["type"], e["msg"]
    if kind == "extra_forbidden":
        parent = e["loc"][:-1]
        model = err.title
        hint = f"unknown key; remove it or check its spelling"
        return f"{where}: [{loc}]: {hint} (in {model if not parent else 'that table'})"
    if kind == "missing":
        return f"{where}: [{loc}]: required key is missing; add it"
    return f"{where}: [{loc}]: {msg.removeprefix('Value error, ')} (got {e.get('input')!r})"


def load_config(path: Path | str | None = None, *, data: dict[str, Any] | None = None) -> PipelineConfig:
    """Read and validate a config file (or an already-parsed dict, e.g. a run's run.toml)."""
    where = str(path) if path is not None else "<config>"
    if data is None:
        path = Path(path) if path is not None else DEFAULT_CONFIG
        where = str(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{where}: config file not found; pass --config with an existing TOML file") from None
        except UnicodeDecodeError as e:
            raise ConfigError(f"{where}: not UTF-8 text (byte {e.start}: {e.reason}); save the config as UTF-8") from None
        except IsADirectoryError:
            raise ConfigError(f"{where}: is a folder; pass --config a TOML file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{where}: not valid TOML: {e}; fix the syntax at that line") from None
    base = Path(path).resolve().parent if path is not None else Path.cwd()

    allowed = list(CORE_SECTIONS) + list(STAGE_NAMES)
    unknown = [k for k in data if k not in allowed]
    if unknown:
        raise ConfigError(f"{where}: [{unknown[0]}]: unknown section; allowed sections: {', '.join(allowed)}")
    for key, value in data.items():
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key} must be a table ([{key}]), got {type(value).__name__}")

    core = {}
    for name, model in CORE_SECTIONS.items():
        try:
            core[name] = model.model_validate(data.get(name, {}))
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, name, where)) from None

    stages: dict[str, BaseModel] = {}
    for name in STAGE_NAMES:
        model = stage_config_model(name)
        try:
            section = model.model_validate(data.get(name, {}), context={"base_dir": base, "run": core["run"]})
        except ValidationError as e:
            raise ConfigError(_format_validation_error(e, name, where)) from None
        stages[name] = section
    return PipelineConfig(core["run"], core["orchestration"], stages, Path(path) if path is not None else None)


def dump_toml(data: dict[str, Any]) -> str:
    """A small TOML writer for run.toml (tomllib reads only); enough for our config shapes."""
    lines: list[str] = []

    def scalar(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
        if isinstance(v, list):
            return "[" + ", ".join(scalar(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{_key(k)} = {scalar(x)}" for k, x in v.items()) + "}"
        raise TypeError(f"cannot write {type(v).__name__} to TOML")

    def table(prefix: str, d: dict[str, Any]) -> None:
        simple = {k: v for k, v in d.items() if not isinstance(v, dict) and not _is_table_list(v)}
        nested = {k: v for k, v in d.items() if isinstance(v, dict)}
        arrays = {k: v for k, v in d.items() if _is_table_list(v)}
        if prefix:
            lines.append(f"\n[{prefix}]")
        lines.extend(f"{_key(k)} = {scalar(v)}" for k, v in simple.items())
        for k, v in nested.items():
            table(f"{prefix}.{_key(k)}" if prefix else _key(k), v)
        for k, items in arrays.items():
            for item in items:
                lines.append(f"\n[[{prefix}.{_key(k)}]]" if prefix else f"\n[[{_key(k)}]]")
                lines.extend(f"{_key(kk)} = {scalar(vv)}" for kk, vv in item.items())

    table("", data)
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def _key(k: str) -> str:
    k = str(k)
    return k if k.replace("_", "").replace("-", "").isalnum() else '"' + k + '"'
