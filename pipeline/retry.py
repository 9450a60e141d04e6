"""Transient failures: which errors are worth another try, and trying again with backoff.

At FineWeb-2 scale a network blip (a Hugging Face read that times out, a connection reset, a Dask worker lost
with its node) must not become a skipped input or a failed stage: the work is retried, the retries are counted
in the manifest, and only what stays broken after the last try is reported as broken. A reader that can skip
one input (ingest under on_error = "skip") asks `on_last_try()`: before the last try it raises the transient
error so that the unit is tried again; on the last try it records the input as skipped, with the reason, instead
of failing the whole unit.
"""

from __future__ import annotations

import errno
import time
from contextvars import ContextVar
from typing import Callable, TypeVar

T = TypeVar("T")

_TRANSIENT_ERRNOS = frozenset({errno.ETIMEDOUT, errno.ECONNRESET, errno.ECONNABORTED, errno.ECONNREFUSED,
                               errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EAGAIN, errno.EPIPE})
# by class name, so that no HTTP or cluster library has to be imported to recognise its errors
_TRANSIENT_NAMES = frozenset({"ReadTimeout", "ConnectTimeout", "ReadTimeoutError", "ConnectTimeoutError",
                              "RemoteProtocolError", "ReadError", "ConnectError", "ChunkedEncodingError",
                              "IncompleteRead", "KilledWorker", "CommClosedError", "StreamClosedError",
                              "HfHubHTTPError"})


_LAST_TRY: ContextVar[tuple[bool, int]] = ContextVar("europa_last_try", default=(True, 1))

_PERMANENT_TEXTS = ("OfflineModeIsEnabled", "offline mode", "Name or service not known", "nodename nor servname")


def is_transient(e: BaseException) -> bool:
    """A failure that another try may not meet: time-outs, dropped connections, a lost worker. Not one that
    will fail the same way every time: the Hub client's offline mode (HF_HUB_OFFLINE), or a host name that does
    not resolve at all (no network; "Temporary failure in name resolution" is transient). Libraries often say
    which only in the message they wrap the cause in, hence the text checks."""
    text = str(e)
    if any(s in text for s in _PERMANENT_TEXTS):
        return False
    if isinstance(e, (TimeoutError, ConnectionError)):
        return True
    if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
        return True
    names = {c.__name__ for c in type(e).__mro__}
    if names & _TRANSIENT_NAMES:
        status = getattr(getattr(e, "response", None), "status_code", None)
        return status is None or status == 429 or status >= 500  # a 404 stays a 404
    return False


def on_last_try() -> tuple[bool, int]:
    """(whether the code running now is the last try `retrying` will make, how many tries that makes). Outside
    `retrying` every try is the last (one try)."""
    return _LAST_TRY.get()


def retrying(fn: Callable[[], T], *, retries: int, backoff_s: float, on_retry: Callable[[int, BaseException], None]
             | None = None, sleep: Callable[[float], None] = time.sleep) -> tuple[T, int]:
    """fn() until it succeeds or fails with a non-transient error or `retries` retries are spent; the delay
    doubles each time (backoff_s, 2 x backoff_s, ...). Returns (its result, the retries it took)."""
    attempt = 0
    while True:
        token = _LAST_TRY.set((attempt >= retries, retries + 1))
        try:
            return fn(), attempt
        except Exception as e:
            if attempt >= retries or not is_transient(e):
                raise
            if on_retry is not None:
                on_retry(attempt + 1, e)
            sleep(backoff_s * 2**attempt)
            attempt += 1
        finally:
            _LAST_TRY.reset(token)
