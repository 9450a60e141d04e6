"""The error of everything that launches a job: one line that names the key or tool and the fix."""

from __future__ import annotations


class LaunchError(ValueError):
    """A problem with the launch, phrased as one line: the key, what is wrong, the fix."""

    exit_code = 2
