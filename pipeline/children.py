"""Child processes that end with the `europa` process that started them, however it ends.

A kill -9 of `europa` runs no cleanup: without this its temporary Prefect server (~230 MB) and a local trainer
went on under PID 1, and a rerun started a second trainer in the same job folder. Linux delivers SIGTERM to a
child whose parent is gone (PR_SET_PDEATHSIG), and each child stops on SIGTERM as on `europa`'s own cleanup.
The signal follows the *thread* that started the child: start one only from a thread that outlives it (the
main thread, or the thread that follows it to its end). Elsewhere than Linux this does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Callable

PR_SET_PDEATHSIG = 1


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _prctl()  # looked up here, not in the forked child


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen (None where it cannot work); a child whose parent died before the
    signal was set ends at once."""
    if _PRCTL is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def exit_with_parent(every_s: float = 1.0) -> None:
    """For a worker process started by a pool (whose starting thread this process cannot know): a daemon thread
    that ends the process once its parent is gone, so a kill -9 of `europa` does not leave it running units."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(1)

    threading.Thread(target=watch, name="europa-exit-with-parent", daemon=True).start()
