"""Which failures are tried again: time-outs and dropped connections yes; bad input, a 404, offline mode no."""

from __future__ import annotations

import errno

import pytest

from pipeline.retry import is_transient, retrying


class HTTPError(OSError):  # shaped like requests' / huggingface_hub's: a response with a status code
    def __init__(self, status: int):
        super().__init__(f"{status} error")
        self.response = type("R", (), {"status_code": status})()


class HfHubHTTPError(HTTPError):
    pass


@pytest.mark.parametrize("error, transient", [
    (TimeoutError("read timed out"), True),
    (ConnectionResetError("reset by peer"), True),
    (OSError(errno.ETIMEDOUT, "timed out"), True),
    (OSError(errno.ENOENT, "no such file"), False),
    (ConnectionError("Couldn't reach 'x' on the Hub (OfflineModeIsEnabled)"), False),
    (ConnectionError("[Errno -2] Name or service not known"), False),
    (ConnectionError("[Errno -3] Temporary failure in name resolution"), True),
    (HfHubHTTPError(503), True),
    (HfHubHTTPError(429), True),
    (HfHubHTTPError(404), False),
    (ValueError("bad"), False),
])
def test_what_is_transient(error, transient):
    assert is_transient(error) == transient


def test_retrying_backs_off_and_gives_up():
    delays, calls = [], []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("blip")
        return "ok"

    assert retrying(flaky, retries=2, backoff_s=1.5, sleep=delays.append) == ("ok", 2)
    assert delays == [1.5, 3.0]
    calls.clear()
    with pytest.raises(TimeoutError):
        retrying(flaky, retries=1, backoff_s=0, sleep=delays.append)
    with pytest.raises(ValueError):
        retrying(lambda: (_ for _ in ()).throw(ValueError("no")), retries=5, backoff_s=0, sleep=delays.append)
