"""The compliance stage's command-line part: `europa stage compliance --strict`, and where its documents are."""

from __future__ import annotations

import argparse
from typing import Any

from pipeline.rundir import RunDir


PROJECTED_FOLDER = "compliance-projected"


def add_stage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--strict", action="store_true",
                        help="fail while any value is open (same as [compliance] strict = true)")
    parser.add_argument("--projected", action="store_true",
                        help="before training: write the documents from the config and the planner's projection into "
                             f"<run>/{PROJECTED_FOLDER}/ (no stage needs to have run)")


def run_instead(args: argparse.Namespace) -> int | None:
    """`--projected` writes documents without the executor (nothing upstream exists); None: run the stage."""
    if not args.projected:
        return None
    import sys

    from pipeline.errors import UsageError
    from pipeline.runconfig import describe_source, resolve
    from stages.compliance.facts import Records
    from stages.compliance.generate import generate, write

    rd, config = resolve(args.config, args.run_dir)
    settings = config.section("compliance")
    if args.strict:
        raise UsageError("--projected with --strict: projected documents are open wherever only the run can tell "
                         "(data, loss, checkpoint); check the run's own documents with --strict")
    print(f"europa: compliance --projected from {describe_source(args.config, rd)}", file=sys.stderr)
    rec = Records.projected_from(rd, config, settings, args.config or str(rd.config_path))
    bundle = generate(rd, settings, rec)
    out = rd.path / PROJECTED_FOLDER
    write(bundle, out)
    print(f"europa: projected EU AI Act documents: {out / 'index.html'} ({len(bundle.open_items)} open item(s), "
          f"{len(bundle.contradictions)} contradiction(s))")
    return 0


def stage_overrides(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    return {"compliance": {"strict": True}} if args.strict else {}


def products(rd: RunDir) -> list[str]:
    index = rd.stage_dir("compliance") / "index.html"
    return [f"EU AI Act documents: {index}"] if index.exists() else []
