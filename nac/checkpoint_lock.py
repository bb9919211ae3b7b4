"""One training at a time per checkpoint: an OS lock on ``<checkpoint>.lock``.

``nac.training.loop.fit`` holds it while it trains; a second training on the same checkpoint is
refused with a message naming the holder."""

from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path

from filelock import FileLock, Timeout


class CheckpointBusyError(RuntimeError):
    """Another training holds the lock on this checkpoint."""


class CheckpointLock:
    """An exclusive OS lock on ``<checkpoint>.lock`` (``filelock.FileLock``: ``fcntl.flock`` on
    POSIX, non-blocking), held by the one training that writes the checkpoint; a second one is
    refused (``CheckpointBusyError``, naming the holder written into the file). The kernel releases
    it when the holder dies, so a crashed or killed training never leaves a stale lock. Where the
    file system has no locks training proceeds unlocked, with a warning (never filelock's soft
    lock: a killed holder would leave it stale).

    Kept by hand on top of filelock: the holder's name in the file (for the refusal message), and
    the file's removal on release, done while still holding it (``models/`` is a DVC output: a
    leftover ``.lock`` would enter its hash; a contender that locked the removed file sees it
    unlinked and retries, filelock's own check)."""

    def __init__(self, path: str | Path, owner: str = ""):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.owner = owner
        self._lock: FileLock | None = None

    def _write_owner(self, fd: int) -> None:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {platform.node()}{': ' + self.owner if self.owner else ''}".encode(), 0)

    def acquire(self) -> "CheckpointLock":
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(
            self.lock_path, thread_local=False, blocking=False, fallback_to_soft=False, on_acquired=self._write_owner
        )
        for attempt in range(2):
            try:
                lock.acquire()
                break
            except Timeout:
                if attempt == 0 and not self.lock_path.exists():  # the holder released it just now
                    continue
                raise CheckpointBusyError(
                    f"checkpoint {self.path} is in use by another training "
                    f"({_holder(self.lock_path) or 'holder unknown'}"
                    f"); two trainings writing one checkpoint would overwrite each other's progress. Wait for it to "
                    f"finish or stop it, then rerun (the lock {self.lock_path} is released when that process ends)"
                ) from None
            except OSError as e:  # no locks on this file system
                warnings.warn(f"cannot lock {self.lock_path} ({e}); training without a lock on {self.path}")
                return self
        self._lock = lock
        return self

    def release(self) -> None:
        if self._lock is None:
            return
        try:
            self.lock_path.unlink(missing_ok=True)  # before unlocking, so no one locks the removed file
        finally:
            self._lock.release()
            self._lock = None

    def __enter__(self) -> "CheckpointLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _holder(lock_path: Path) -> str:
    """What the holder wrote into its lock file ("" when it cannot be read)."""
    try:
        with open(lock_path, "rb") as f:
            return f.read(512).decode(errors="replace").strip()
    except OSError:
        return ""
