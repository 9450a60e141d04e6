"""The configuration reference (docs/configuration.md), generated from the config models themselves.

    python -m pipeline.config_reference            # rewrite docs/configuration.md
    python -m pipeline.config_reference --check    # exit 1 when the committed file is out of date

Walks `[run]`, `[orchestration]` and every implemented stage's `Config` model (pipeline.registry), nested
tables included, and writes one table per TOML table: key, type (with its bounds), default, description.
The descriptions are the models' own `Field(description=...)` / attribute docstrings, so the reference
cannot say something the code does not; tests/pipeline/test_config_reference.py fails when the file drifts.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pipeline.config import CORE_SECTIONS, REPO_ROOT

OUTPUT = REPO_ROOT / "docs" / "configuration.md"
GENERATOR = "python -m pipeline.config_reference"

_SCALARS = {str: "string", int: "integer", float: "float", bool: "boolean", Path: "path"}
_BOUNDS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _bounds(metadata: list[Any]) -> list[str]:
    out = []
    for m in metadata:
        for attr, sign in _BOUNDS.items():
            value = getattr(m, attr, None)
            if value is not None:
                # one spelling for a whole-number bound: pydantic may hand it back as 0 or 0.0 depending on what
                # else built a schema from the same field first
                if isinstance(value, float) and value.is_integer():
                    value = int(value)
                out.append(f"{sign} {value}")
        pattern = getattr(m, "pattern", None)
        if pattern is not None:
            out.append(f"matching `{pattern}`")
    return out


def type_name(tp: Any) -> str:
    """A reader's name for an annotation: `"a"` or `"b"`, list of string, table of string to float, ..."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        inner, *meta = args
        return " ".join([type_name(inner), *_bounds(meta)])
    if origin is typing.Literal:
        return " or ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        name = " or ".join(type_name(a) for a in rest)
        return f"{name}, optional" if len(rest) < len(args) else name
    if origin in (list, tuple, set, frozenset):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"table of {type_name(args[0])} to {type_name(args[1])}" if args else "table"
    if _is_model(tp):
        return "table"
    return _SCALARS.get(tp, getattr(tp, "__name__", str(tp)))


def _default(field: FieldInfo) -> Any:
    if field.default_factory is not None:
        try:
            return field.default_factory()
        except TypeError:  # a factory that takes the validated data
            return PydanticUndefined
    return field.default


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def toml_value(value: Any) -> str:
    """A default as it would be written in the TOML file."""
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k if str(k).replace('_', '').isalnum() else json.dumps(str(k))} = {toml_value(v)}"
                                for k, v in value.items()) + " }"
    return str(value)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _doc(model: type[BaseModel]) -> str:
    doc = model.__doc__ or ""
    if not doc or doc == BaseModel.__doc__ or any(doc is b.__doc__ for b in model.__mro__[1:] if _is_model(b)):
        return ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _model_in(tp: Any) -> tuple[type[BaseModel], str] | None:
    """(model, how) when a field holds a nested table: "table", "array" ([[...]]) or "map" (table of tables)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _model_in(args[0])
    if origin in (typing.Union, types.UnionType):
        found = [m for m in (_model_in(a) for a in args if a is not type(None)) if m]
        return found[0] if found else None
    if _is_model(tp):
        return tp, "table"
    if origin in (list, tuple) and args and _is_model(args[0]):
        return args[0], "array"
    if origin is dict and len(args) == 2 and _is_model(args[1]):
        return args[1], "map"
    return None


def section(path: str, model: type[BaseModel], how: str = "table") -> list[str]:
    """Markdown for one TOML table and, after it, its nested tables."""
    heading = {"table": f"[{path}]", "array": f"[[{path}]]", "map": f"[{path}.<key>]"}[how]
    lines = [f"### `{heading}`", ""]
    if how == "array":
        lines += ["A list of tables: repeat the header once per entry.", ""]
    if doc := _doc(model):
        lines += [doc, ""]
    lines += ["| key | type | default | description |", "|---|---|---|---|"]
    nested: list[tuple[str, type[BaseModel], str]] = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        tp = type_name(field.annotation)
        bounds = _bounds(field.metadata)
        if bounds:
            base, optional = tp.removesuffix(", optional"), tp.endswith(", optional")
            tp = f"{base} {' '.join(bounds)}" + (", optional" if optional else "")
        sub = _model_in(field.annotation)
        if sub is not None:
            child = f"{path}.{key}"
            nested.append((child, *sub))
            ref = {"table": f"[{child}]", "array": f"[[{child}]]", "map": f"[{child}.<key>]"}[sub[1]]
            tp = {"table": "table", "array": "list of tables", "map": "table of tables"}[sub[1]] + f", see `{ref}`"
        default = _default(field)
        if default is PydanticUndefined:
            shown = "**required**"
        elif default is None:
            shown = "unset"
        elif sub is not None and sub[1] == "table":
            shown = "(its own defaults)"
        else:
            shown = f"`{toml_value(default)}`"
        lines.append(f"| `{key}` | {_cell(tp)} | {_cell(shown)} | {_cell(field.description or '')} |")
    lines.append("")
    for child, sub_model, sub_how in nested:
        lines += section(child, sub_model, sub_how)
    return lines


def render() -> str:
    from pipeline.registry import STAGE_NAMES, stage_config_model

    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated by `{GENERATOR}` from the config models; do not edit by hand. -->",
        "",
        "One TOML file configures a run: `[run]` and `[orchestration]`, then one section per stage "
        "(`configs/demo.toml` is the embedded default). Unknown keys, wrong types and unknown language codes are "
        "errors that name the key. Relative paths are relative to the config file. A key left out takes its "
        "default; *unset* means the key is absent (no value). Each stage's fingerprint covers its own section and "
        "`[run]`, so changing a key reruns that stage and the stages after it; `[orchestration]` changes how "
        "units run, never what they produce.",
        "",
        "This page is generated from the code (`" + GENERATOR + "`); a test fails when it is out of date.",
        "",
        "## Core",
        "",
    ]
    for name, model in CORE_SECTIONS.items():
        lines += section(name, model)
    for name in STAGE_NAMES:
        model = stage_config_model(name)
        lines += [f"## {name}", ""]
        lines += section(name, model)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=GENERATOR, description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="Compare with the committed file instead of writing it.")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date with the config models; run `{GENERATOR}` and commit it", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
