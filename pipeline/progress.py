"""Progress on the terminal for long work, the same whichever engine runs the units.

On a terminal: one live status line per running stage (units done / total, work per second, ETA; the training
loss and tokens/s), redrawn in place, and a permanent line when a stage starts, says something worth keeping,
or ends (with what it skipped and why). Elsewhere (log files, CI, Slurm output, where a redrawn line is
garbage): the same as plain lines, at most one status line every MIN_INTERVAL_S per stage. Everything also
goes to the `europa` logger, which the engines write into the run directory's log file (logs/).

Lines go to stderr directly, not through print(), so Prefect's print capture never turns them into log
records with a "Flow run 'x' -" prefix; the Prefect UI gets the stages' artifacts instead.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from pipeline.secrets import redact_text

if TYPE_CHECKING:
    from pipeline.manifest import Manifest

log = logging.getLogger("europa")
_lock = threading.Lock()
_last: dict[str, float] = {}
_started: dict[str, float] = {}
_work: dict[str, tuple[float, str]] = {}  # stage -> (amount of work done, its unit), for the rate
_live: str = ""  # the status line currently drawn (terminal only)
quiet = False
MIN_INTERVAL_S = 2.0


def _is_terminal() -> bool:
    return sys.stderr.isatty() and os.environ.get("TERM") != "dumb"


def _emit(line: str) -> None:
    """A permanent line (the live status line, if any, is cleared first and drawn again after it). Redacted
    here, once for the terminal and the run log: a line may quote a source's path or URL (a skipped input)."""
    line = redact_text(line)
    log.info(line)
    if quiet:
        return
    if _is_terminal() and _live:
        sys.stderr.write("\r\x1b[K" + line + "\n" + _live)
    else:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _status(stage: str, line: str, *, final: bool = False) -> None:
    """The live line of a stage: redrawn on a terminal; elsewhere written at most every MIN_INTERVAL_S."""
    global _live
    now = time.monotonic()
    if not final and now - _last.get(stage, 0.0) < (0.2 if _is_terminal() else MIN_INTERVAL_S):
        return
    _last[stage] = now
    if quiet:
        return
    if _is_terminal():
        _live = "" if final else line
        sys.stderr.write("\r\x1b[K" + (line + "\n" if final else line))
        sys.stderr.flush()
    else:
        _emit(line)


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds // 60:.0f}m{seconds % 60:02.0f}s"
    return f"{seconds // 3600:.0f}h{seconds % 3600 // 60:02.0f}m"


def stage_started(stage: str, units: int | None, step: str | None = None) -> None:
    """A stage (or one step of it) begins; `units` None for a stage that runs as one piece."""
    with _lock:
        _started[stage] = time.monotonic()
        _last.pop(stage, None)
        _work.pop(stage, None)
    if units is None:
        _emit(f"[{stage}] started")
    else:
        _emit(f"[{stage}] {'step ' + step + ': ' if step else ''}{units} unit(s)")


def work_done(stage: str, work: tuple[float, str]) -> None:
    """Work of units reported before it was known (units seen finished while their task still ran)."""
    with _lock:
        amount, name = _work.get(stage, (0.0, work[1]))
        _work[stage] = (amount + work[0], name)


def unit_done(stage: str, done: int, total: int, unit_id: str, work: tuple[float, str] | None = None) -> None:
    """One more unit finished; `work` = (amount, unit name) it did, e.g. (1200, "docs"), for the rate shown."""
    with _lock:
        now = time.monotonic()
        if work:
            amount, name = _work.get(stage, (0.0, work[1]))
            _work[stage] = (amount + work[0], name)
        elapsed = max(now - _started.get(stage, now), 1e-9)
        eta = elapsed / done * (total - done) if done else 0.0
        rate = ""
        if stage in _work:
            amount, name = _work[stage]
            per_s = amount / elapsed
            rate = f", {per_s:,.1f} {name}/s" if per_s < 100 else f", {per_s:,.0f} {name}/s"
        line = (f"[{stage}] {done}/{total} units ({done / total:.0%}){rate}, {_duration(elapsed)} elapsed"
                + (f", ~{_duration(eta)} left" if done < total else ""))
    _status(stage, line, final=done == total)


def training(stage: str, step: int, steps: int, loss: float, tokens_per_s: float | None,
             since: tuple[int, float] | None = None) -> None:
    """The live line of a training job: step, loss, throughput, ETA (from the pace since `since` = (a step seen
    earlier, its monotonic time), so start-up and a resumed job's earlier steps do not distort it)."""
    eta = 0.0
    if since is not None and step > since[0] and steps > step:
        eta = (time.monotonic() - since[1]) / (step - since[0]) * (steps - step)
    line = (f"[{stage}] step {step:,}/{steps:,}, loss {loss:.4f}"
            + (f", {tokens_per_s:,.0f} tokens/s per device" if tokens_per_s else "")
            + (f", ~{_duration(eta)} left" if eta else ""))
    _status(stage, line, final=step >= steps)


def note(stage: str, message: str) -> None:
    _emit(f"[{stage}] {message}")


def stage_finished(stage: str, manifest: Manifest) -> None:
    counts = ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in manifest.summary.items())
    _emit(f"[{stage}] done in {manifest.duration_s:.1f}s: {counts}")
    if manifest.skipped:
        _emit(f"[{stage}] {skipped_summary(manifest.skipped)}")


def skipped_summary(skipped: list[dict[str, Any]], examples: int = 3) -> str:
    """What a stage skipped, by reason, with the first few places: the last thing a user should not miss."""
    reasons = Counter(s.get("reason", "?") for s in skipped)
    parts = []
    for reason, n in reasons.most_common():
        where = [f"{s.get('input', '?')}" + (f":{s['line']}" if s.get("line") else "")
                 for s in skipped if s.get("reason") == reason][:examples]
        parts.append(f"{n} {reason} ({', '.join(where)}{', ...' if n > examples else ''})")
    return f"skipped {len(skipped)} input(s), nothing of them is in the output: " + "; ".join(parts) + \
        " (every one is listed in the manifest's `skipped`)"
