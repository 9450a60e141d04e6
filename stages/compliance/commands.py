"""The compliance stage's command-line part: `europa stage compliance --strict`, and where its documents are."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.rundir import RunDir


def add_stage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="fail while any value is open (same as [compliance] strict = true)")


def stage_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {"compliance": {"strict": True}} if args.strict else {}


def products(rd: RunDir) -> list[str]:
    index = rd.stage_dir("compliance") / "index.html"
    return [f"EU AI Act documents: {index}"] if index.exists() else []
