"""One training at a time per checkpoint: an OS lock on ``<checkpoint>.lock``.

``nac.training.loop.fit`` holds it while it trains; a second training on the same checkpoint is
refused with a message naming the holder."""
from __future__ import annotations

import os
from pathlib import Path


class CheckpointBusyError(RuntimeError):
    """Another training holds the lock on this checkpoint."""


class CheckpointLock:
    """An exclusive OS lock on ``<checkpoint>.lock`` (``fcntl.flock``, non-blocking), held by the
    one training that writes the checkpoint; a second one is refused (``CheckpointBusyError``).
    The kernel releases it when the holder dies, so a crashed or killed training never leaves a
    stale lock; a clean release also removes the file. Where ``flock`` is unavailable (not a POSIX
    system, a file system without locks) training proceeds unlocked, with a warning."""

    def __init__(self, path: str | Path, owner: str = ""):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.owner = owner
        self._fd: int | None = None

    def acquire(self) -> "CheckpointLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_text(fd)
                os.close(fd)
                raise CheckpointBusyError(
                    f"checkpoint {self.path} is in use by another training ({holder or 'holder unknown'}); two "
                    f"trainings writing one checkpoint would overwrite each other's progress. Wait for it to finish "
                    f"or stop it, then rerun (the lock {self.lock_path} is released when that process ends)") from None
            except OSError as e:  # no locks on this file system
                os.close(fd)
                import warnings

                warnings.warn(f"cannot lock {self.lock_path} ({e}); training without a lock on {self.path}")
                return self
            try:  # the previous holder may have removed the file between our open and flock
                st, now = os.fstat(fd), os.stat(self.lock_path)
                same = (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} on {os.uname().nodename}{': ' + self.owner if self.owner else ''}".encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            self.lock_path.unlink(missing_ok=True)  # before unlocking, so no one locks the removed file
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "CheckpointLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_text(fd: int) -> str:
    try:
        return os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        return ""
