"""Checkpoints that load without unpickling arbitrary objects.

A checkpoint is a dict of tensors and plain values (``torch.load(weights_only=True)`` reads it):
``{"format": 1, "config": ModelConfig.to_dict(), "model": state_dict, **extra}``; ``extra``
carries training state (optimizer, scheduler, epoch, RNG states, ...). Writes are atomic (a
temporary file renamed into place), so an interrupted save never leaves a truncated checkpoint.

Reliability guarantees:

- only finite tensors are ever written (``save_checkpoint`` refuses otherwise) or read back
  (``load_checkpoint`` refuses a poisoned file written before this check existed);
- a full disk leaves the previous checkpoint intact and no temporary file behind
  (``DiskFullError`` says how much space the write needs);
- ``load_model(..., expect_config=...)`` refuses a checkpoint trained with another model config;
- ``CheckpointLock`` lets one training at a time write a given checkpoint;
- ``source_fingerprint`` hashes the sources a training runs (what a resume must agree on).
"""
from __future__ import annotations

import ast
import errno
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterable, Iterator

import torch

from nac.config import ModelConfig
from nac.model import NAC, build_model

FORMAT = 1


class PoisonedCheckpointError(RuntimeError):
    """A checkpoint holds (or would hold) NaN or infinite tensors: training diverged."""


class CheckpointMismatchError(RuntimeError):
    """A checkpoint was trained with another model config than the current params ask for."""


class CheckpointBusyError(RuntimeError):
    """Another training holds the lock on this checkpoint."""


class DiskFullError(OSError):
    """No space left to write a checkpoint; the previous one (if any) is intact."""

    def __init__(self, path: Path, needed: int, free: int | None):
        self.path, self.needed, self.free = path, needed, free
        free_txt = f"{human_bytes(free)} free" if free is not None else "free space unknown"
        super().__init__(errno.ENOSPC, f"no space left on the device to write checkpoint {path}: it needs about "
                                       f"{human_bytes(needed)}, {free_txt} in {path.parent}; the previous checkpoint "
                                       "is intact. Free some space (or point models/ to a larger disk) and rerun")


def human_bytes(n: int | float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _tensors(obj: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in a nested dict / list / tuple, with a dotted name."""
    if isinstance(obj, torch.Tensor):
        yield prefix, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _tensors(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _tensors(v, f"{prefix}.{i}" if prefix else str(i))


def non_finite_tensors(obj: Any) -> list[str]:
    """Names of the floating-point tensors in ``obj`` (nested dicts / lists) holding a NaN or inf."""
    return [name for name, t in _tensors(obj)
            if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())]


def _name_some(names: list[str], k: int = 3) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def save_checkpoint(path: str | Path, model: NAC, **extra: Any) -> Path:
    """Write ``{"format", "config", "model", **extra}`` atomically. Refuses (``PoisonedCheckpointError``)
    when any tensor (weights, optimizer state, EMA, ...) is NaN or infinite, and raises
    ``DiskFullError`` on a full disk; either way the file already at ``path`` is left untouched
    and no temporary file stays behind."""
    path = Path(path)
    payload = {"format": FORMAT, "config": model.config.to_dict(), "model": model.state_dict(), **extra}
    bad = non_finite_tensors(payload)
    if bad:
        raise PoisonedCheckpointError(f"refusing to write checkpoint {path}: {len(bad)} tensor(s) hold NaN or infinite "
                                      f"values ({_name_some(bad)}); the file on disk is left untouched")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except BaseException as e:  # a full disk, Ctrl-C mid-write, ...: never leave a partial .tmp
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            needed = sum(t.numel() * t.element_size() for _, t in _tensors(payload))
            try:
                free = shutil.disk_usage(path.parent).free
            except OSError:
                free = None
            raise DiskFullError(path, needed, free) from e
        raise
    return path


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; train the model first (`dvc repro`)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # a truncated file or a foreign pickle
        raise RuntimeError(f"checkpoint {path} cannot be read safely ({e}); delete it and retrain") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise RuntimeError(f"{path} is not a nac checkpoint of format {FORMAT}; delete it and retrain")
    bad = non_finite_tensors(ckpt)
    if bad:
        raise PoisonedCheckpointError(
            f"checkpoint {path} holds NaN or infinite values in {len(bad)} tensor(s) ({_name_some(bad)}): the training "
            "that wrote it diverged. Delete it and retrain (`dvc repro`; a rerun of the training moves it aside "
            "itself), with a lower train.lr or train.grad_clip set if it diverges again")
    return ckpt


def load_model(path: str | Path, map_location: str | torch.device = "cpu", expect_config: dict | None = None) -> NAC:
    """Rebuild the model from the stored config and load its weights (strictly): the EMA
    weights when training kept an EMA (they are what training evaluated), else the raw ones.

    ``expect_config``: the model config the current params ask for (``ModelConfig.to_dict()``);
    a checkpoint trained with another one is refused (``CheckpointMismatchError``) instead of
    silently evaluating a stale model."""
    ckpt = load_checkpoint(path, map_location)
    if expect_config is not None:
        diff = config_diff(ckpt.get("config") or {}, expect_config)
        if diff:
            raise CheckpointMismatchError(
                f"checkpoint {path} was trained with another model config than the current params ask for "
                f"(differing keys: {'; '.join(diff)}); retrain it with the current params (`dvc repro`, which reruns "
                "the training stage), or restore the params it was trained with")
    model = build_model(ckpt["config"], fit_signatures=False)  # fitted signatures come from the state dict
    model.load_state_dict(model_weights(ckpt))
    return model


def model_weights(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights to evaluate: the EMA copy's (``AveragedModel`` state, ``module.`` prefix) if any."""
    if "ema" in ckpt:
        return {k[len("module."):]: v for k, v in ckpt["ema"].items() if k.startswith("module.")}
    return ckpt["model"]


def _normalized_config(d: dict) -> dict:
    """``d`` with the current defaults filled in (a key added to ``ModelConfig`` since the
    checkpoint was written reads as its default, exactly as ``load_model`` rebuilds it)."""
    try:
        return ModelConfig.from_dict(dict(d)).to_dict()
    except (ValueError, TypeError, KeyError):  # keys this code does not know: compare as stored
        return dict(d)


def _short(v: Any, limit: int = 60) -> str:
    text = repr(v)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def dict_diff(stored: dict, expected: dict, stored_name: str = "checkpoint", expected_name: str = "now") -> list[str]:
    """``"key: checkpoint X, now Y"`` for every key whose value differs (a missing key reads as
    ``<absent>``), in sorted key order; empty when the dicts agree."""
    absent = "<absent>"
    out = []
    for k in sorted(set(stored) | set(expected), key=str):
        a, b = stored.get(k, absent), expected.get(k, absent)
        if a != b:
            out.append(f"{k}: {stored_name} {a if a is absent else _short(a)}, {expected_name} "
                       f"{b if b is absent else _short(b)}")
    return out


def config_diff(stored: dict, expected: dict) -> list[str]:
    """The differing keys of two model configs (generic: any field, current defaults filled in)."""
    return dict_diff(_normalized_config(stored), _normalized_config(expected), "checkpoint", "params")


def aside_path(path: str | Path, tag: str = "stale") -> Path:
    """A free name next to ``path`` for moving it aside: ``<name>.<tag>-<YYYYmmdd-HHMMSS>[-N]``."""
    path = Path(path)
    base = path.with_name(f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}")
    dest, n = base, 1
    while dest.exists():
        n += 1
        dest = base.with_name(f"{base.name}-{n}")
    return dest


def move_aside(path: str | Path, dest: str | Path | None = None, tag: str = "stale") -> Path:
    """Rename ``path`` to ``dest`` (or a fresh ``aside_path``), never overwriting; returns the new path."""
    path = Path(path)
    dest = Path(dest) if dest is not None and not Path(dest).exists() else aside_path(path, tag)
    os.replace(path, dest)
    return dest


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


# What a training's result depends on, besides its configs and data: the model, the training
# loop, checkpointing, evaluation and the data pipeline, the one build-then-fit (``train_run``)
# and the tracks' input wrappers.
RESULT_SOURCES = ("circuits/", "baselines/", "model.py", "config.py", "graphs.py", "regularizer.py", "training/", "checkpoint.py",
                  "evaluation.py", "data/", "pipeline/runs.py", "pipeline/datasets.py", "tracks/common.py")


def source_closure(entries: Iterable[str], root: str | Path | None = None,
                   include: Iterable[str] = RESULT_SOURCES) -> list[Path]:
    """The source files a training runs: start from the ``entries`` modules (e.g.
    ``"nac.training.loop"``) and follow every import statement (function-local ones too, found
    by parsing, so the answer never depends on what a process happened to import), keeping and
    following only files under ``include`` (paths relative to the package ``root``, a trailing
    ``/`` for a folder). The entries' own imports are always followed. Sorted; deterministic."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    pkg, include = root.name, tuple(include)

    def allowed(f: Path) -> bool:
        rel = f.relative_to(root).as_posix()
        return any(rel == inc or (inc.endswith("/") and rel.startswith(inc)) for inc in include)

    def files_of(module: str) -> list[Path]:
        """The module's file and the ``__init__`` of every package above it (they run on import)."""
        parts = module.split(".")
        if parts[0] != pkg:
            return []
        out = [root.joinpath(*parts[1:i], "__init__.py") for i in range(1, len(parts))]
        rel = root.joinpath(*parts[1:])
        out += [rel.with_name(rel.name + ".py") if len(parts) > 1 else root / "__init__.py", rel / "__init__.py"]
        return [f for f in out if f.is_file()]

    def imports(f: Path) -> set[str]:
        module = ".".join((pkg, *f.relative_to(root).with_suffix("").parts))
        package = module.rsplit(".", 1)[0] if f.name != "__init__.py" else module.removesuffix(".__init__")
        names = set()
        for node in ast.walk(ast.parse(f.read_bytes(), filename=str(f))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)  # `from pkg import submodule`
        return {n for n in names if n == pkg or n.startswith(pkg + ".")}

    seen: set[Path] = set()
    kept: set[Path] = set()
    queue = [(f, True) for m in entries for f in files_of(m)]
    while queue:
        f, is_entry = queue.pop()
        if f in seen:
            continue
        seen.add(f)
        if allowed(f):
            kept.add(f)
        elif not is_entry:
            continue
        for name in imports(f):
            queue.extend((g, False) for g in files_of(name))
    return sorted(kept)


def source_fingerprint(entries: Iterable[str], root: str | Path | None = None,
                       include: Iterable[str] = RESULT_SOURCES) -> str:
    """sha256 over the relative paths and bytes of ``source_closure(entries, root, include)``."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in source_closure(entries, root, include):
        h.update(f.relative_to(root).as_posix().encode() + b"\0")
        h.update(f.read_bytes() + b"\0")
    return h.hexdigest()
