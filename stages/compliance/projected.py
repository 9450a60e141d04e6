"""Documents before training: the pretrain record as the planner projects it from the config, for
`europa stage compliance --projected`.

Why: Art. 52(1) asks for a notification as soon as it is known that the 1e25 FLOP threshold will be met, which
for a planned run is before its first step; the providers of a run like EUROPA's also prepare Annex XI while the
data is still being collected. So the documents are written from what is known then: the model (from the
flavor and the tokenizer's vocabulary), the planned tokens and compute, and the planner's time and device-hours
(its expected band; the pessimistic and optimistic bands are stated beside it). Every such value is marked
*projected* (facts.PROJECTED) and cites the planner and the config; what only the run can tell (loss, the
checkpoint's files, the data) is absent, so it is open. The documents say on their first line that they are
projected.
"""

from __future__ import annotations

from pathlib import Path

PROJECTED_NOTICE = (
    "PROJECTED before training: written from the run config and the planner's estimate (europa plan), not from "
    "records of a run. Values marked projected are the planner's; what only the run can tell is open.")


def origin(config_path: str | Path, band: str) -> str:
    return f"projected pretrain record (europa plan --config {config_path}, {band} band)"
