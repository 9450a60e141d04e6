"""File primitives every layer shares: atomic writes, an exclusive lock, checksums, JSON-lines records.

One home for each, because each is easy to get subtly wrong (a write that a crash leaves half done, a lock that
outlives its holder, a torn last line read as damage) and every copy would have to get it right again. Nothing
here knows about stages or runs.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from pipeline.errors import EuropaError


# --- atomic writes -----------------------------------------------------------------------------------------

def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` so that readers see the old file or the new one, never a part (write aside, then rename)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(final: Path, *, replace: bool = False) -> Iterator[Path]:
    """A folder that appears under its final name only when the block finished: yields a temporary sibling to
    fill, then renames it into place. `replace`: an existing folder of that name is swapped out (else the rename
    fails and the temporary is discarded: another writer finished first). A failure leaves nothing behind."""
    final = Path(final)
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if replace and final.exists():
            old = final.with_name(f".{final.name}.old-{os.getpid()}-{time.monotonic_ns()}")
            final.rename(old)
            tmp.rename(final)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:  # a file (or link) stood where the folder goes
                old.unlink(missing_ok=True)
        else:
            try:
                tmp.rename(final)
            except OSError:  # a concurrent writer renamed its identical copy first
                shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def remove_tree(path: Path | str) -> None:
    """Delete a folder and everything in it, as shutil.rmtree(ignore_errors=True) does, without listing a folder
    into memory first: a step's work folder holds one folder per unit, 10^5 of them at full scale. Links are
    removed, never followed."""
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        remove_tree(entry.path)
                    else:
                        os.unlink(entry.path)
                except FileNotFoundError:
                    pass
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        os.unlink(path)


# --- the lock ------------------------------------------------------------------------------------------------

class Locked(EuropaError):
    """Another process holds the lock; the message names it (from what it wrote into the lock file)."""

    exit_code = 3


@contextmanager
def exclusive_lock(lock_path: Path, what: str, *, busy: str, error: type[Locked] = Locked) -> Iterator[None]:
    """Hold an exclusive flock on `lock_path` for the block, writing `what` into the file for whoever finds it
    taken. The kernel releases flock when the holder dies, so a crash never leaves a stale lock. `busy` is the
    message of the `error` raised when it is taken, with `{holder}` standing for what the holder wrote."""
    lock_path = Path(lock_path)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise error(busy.format(holder=holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({what}, since {time.strftime('%Y-%m-%dT%H:%M:%S%z')})".encode(), 0)
        yield
    finally:
        os.close(fd)


def is_locked(lock_path: Path) -> bool:
    """Whether some process holds `lock_path` now (without taking it)."""
    if not Path(lock_path).exists():
        return False
    fd = os.open(lock_path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


# --- checksums -----------------------------------------------------------------------------------------------

def sha256_file(path: Path | str, chunk: int = 1 << 20, on_read: Callable[[int], None] | None = None) -> str:
    """`on_read(bytes)` after each block: a long check can show its progress."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            if on_read is not None:
                on_read(len(block))
    return h.hexdigest()


def sha256_files(paths: list[Path]) -> list[str]:
    """sha256 of each file, on a few threads (hashlib and file reads release the GIL): checkpoint shards and
    Parquet parts are many large files, and one core reads far below a parallel file system's bandwidth."""
    if len(paths) < 2:
        return [sha256_file(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        return list(pool.map(sha256_file, paths))


# --- JSON lines ----------------------------------------------------------------------------------------------

def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Rows of a JSON-lines file that a process appends to; a torn last line (the writer died mid-line) is
    ignored, any other bad line is an error naming the file and the line. A missing file has no rows."""
    path = Path(path)
    if not path.exists():
        return []
    rows, lines = [], path.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise ValueError(f"{path}:{i + 1}: not JSON; the file is damaged") from None
    return rows


def append_jsonl(path: Path, row: dict[str, Any]) -> None:
    """Append one record as a single write, so concurrent appenders and crashes leave whole lines (or a torn
    last one, which read_jsonl ignores)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, ensure_ascii=False) + "\n")
