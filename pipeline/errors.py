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
