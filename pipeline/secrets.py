"""Keep secrets out of every record the pipeline writes.

Manifests, logs, Prefect artifacts and the compliance documents are shared far more widely than the machine
that ran the job, so a Hugging Face token or a password in a source URL must never reach them. Configs name
secrets indirectly (`token_env = "HF_TOKEN"`); this module scrubs whatever slips through anyway.
"""

from __future__ import annotations

import os
import re
from typing import Any

MASK = "***"

_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<cred>[^/@\s:]+(?::[^/@\s]*)?)@")
_SECRET_QUERY = re.compile(
    r"(?P<key>[?&](?:token|access_token|api_key|apikey|key|sig|signature|password|secret|X-Amz-Signature|X-Amz-Credential)=)[^&#\s]+",
    re.IGNORECASE,
)
_TOKEN_LIKE = re.compile(r"\b(?:hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16})\b")
_SECRET_KEY_NAMES = re.compile(r"(?:^|_)(?:token|password|passwd|secret|api_key|apikey|credentials?)$", re.IGNORECASE)
_SECRET_ENV_NAMES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_TOKEN")


def redact_text(text: str) -> str:
    """Mask credentials in URLs, secret query parameters, well-known token shapes and known secret env values."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    text = _SECRET_QUERY.sub(lambda m: f"{m['key']}{MASK}", text)
    text = _TOKEN_LIKE.sub(MASK, text)
    for name in _SECRET_ENV_NAMES:
        value = os.environ.get(name)
        if value and len(value) >= 8:
            text = text.replace(value, MASK)
    return text


def redact(obj: Any) -> Any:
    """Recursively redact a JSON-like structure; values under secret-looking keys are masked outright.

    Keys ending in `_env` hold the *name* of an environment variable (e.g. token_env = "HF_TOKEN"), which is
    not a secret, so they are kept. Only string values are masked: a secret is text, while a number under a
    key like `flops_per_token` is a measurement.
    """
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, dict):
        return {
            k: (MASK if isinstance(k, str) and _SECRET_KEY_NAMES.search(k) and not k.endswith("_env") and isinstance(v, str) and v
                else redact(v))
            for k, v in obj.items()
        }
    if isinstance(obj, (list, tuple)):
        return [redact(v) for v in obj]
    return obj


def redact_exception(e: BaseException) -> BaseException:
    """Mask secrets in an exception's message, in place, before anything records it: Prefect stores a failed run's
    message in its database and events, and the run's state file keeps it."""
    try:
        e.args = tuple(redact_text(a) if isinstance(a, str) else a for a in e.args)
        if isinstance(e, OSError):
            for attr in ("filename", "filename2"):
                if isinstance(getattr(e, attr, None), str):
                    setattr(e, attr, redact_text(getattr(e, attr)))
    except (AttributeError, TypeError):  # an exception type whose args cannot be set keeps its own
        pass
    return e


_installed = False


def install_log_redaction() -> None:
    """Every log record this process makes is masked as it is made (message, arguments and traceback), whichever
    handler takes it: the run's log file, Prefect's console, or Prefect's API handler, which sends it to the
    server's database. Idempotent; `europa` and every worker process call it."""
    global _installed
    if _installed:
        return
    import logging

    make = logging.getLogRecordFactory()
    formatter = logging.Formatter()

    def redacting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is logging's own error to report
            return record
        record.msg, record.args = redact_text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(formatter.formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(redacting)
    _installed = True
