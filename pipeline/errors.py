"""The errors a user sees, each with the exit code `europa` ends with.

Exit codes are part of the CLI contract (scripts and schedulers act on them), so each user-facing error
carries its own instead of the CLI guessing from an exception's base class:
    0 success, 1 a stage failed, 2 bad usage, config or input, 3 the run directory (or a store) is in use.
Anything else that escapes is a bug: exit 1 with its type and message (EUROPA_DEBUG=1 shows the traceback).
"""

from __future__ import annotations


class EuropaError(Exception):
    """Base of the errors phrased for the user: the message names what failed, the file or key, and the fix."""

    exit_code = 1


class UsageError(EuropaError, ValueError):
    """Bad usage, configuration or input: nothing ran, fix the command or the file."""

    exit_code = 2


class Terminated(KeyboardInterrupt):
    """SIGTERM (a scheduler's or an operator's `kill`): unwinds as Ctrl-C does, so the stage is left
    *interrupted* with its finished units kept and the same one line is printed; only the exit code differs
    (143, 128 + SIGTERM, which schedulers read as "terminated")."""


def interrupt_on_sigterm() -> None:
    """Make SIGTERM raise Terminated in this process's main thread. Prefect's flow engine puts its own handler in
    place for every flow run (it raises its TerminationSignal, which then reads as a crashed stage), so the stage
    flows call this again inside their body (flows/stages.py)."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_terminated)


def _raise_terminated(signum, frame) -> None:
    raise Terminated("SIGTERM")
