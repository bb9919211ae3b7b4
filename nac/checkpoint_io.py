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
- ``move_aside`` renames a checkpoint written with other settings instead of overwriting it.

One training at a time writes a checkpoint (``nac.checkpoint_lock``); what a resume must agree
on includes the hash of the training's sources (``nac.fingerprint``).
"""

from __future__ import annotations

import errno
import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import torch

from nac.config import ModelConfig
from nac.model import NAC
from nac.registry import build_model

FORMAT = 1

# Model-config keys that older checkpoints store but that select nothing now, dropped when a stored
# config is read: readin_impl chose the read-in's reference form (nac/testing/reference_forms.py).
RETIRED_CONFIG_KEYS = ("readin_impl",)


class PoisonedCheckpointError(RuntimeError):
    """A checkpoint holds (or would hold) NaN or infinite tensors: training diverged."""


class DamagedCheckpointError(RuntimeError):
    """A checkpoint file cannot be read: empty, truncated (a copy or a write cut short), or not a
    nac checkpoint. A training moves it aside and starts over, as it does a NaN one."""

    def __init__(self, path: Path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"checkpoint {path} cannot be read safely ({reason}); delete it and retrain")


class CheckpointMismatchError(RuntimeError):
    """A checkpoint was trained with another model config than the current params ask for."""


class DiskFullError(OSError):
    """No space left to write a checkpoint; the previous one (if any) is intact."""

    def __init__(self, path: Path, needed: int, free: int | None):
        self.path, self.needed, self.free = path, needed, free
        free_txt = f"{human_bytes(free)} free" if free is not None else "free space unknown"
        super().__init__(
            errno.ENOSPC,
            f"no space left on the device to write checkpoint {path}: it needs about "
            f"{human_bytes(needed)}, {free_txt} in {path.parent}; the previous checkpoint "
            "is intact. Free some space (or point models/ to a larger disk) and rerun",
        )


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
    return [
        name
        for name, t in _tensors(obj)
        if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())
    ]


def _name_some(names: list[str], k: int = 3) -> str:
    return ", ".join(names[:k]) + (f" and {len(names) - k} more" if len(names) > k else "")


def save_checkpoint(path: str | Path, model: NAC, *, mirror_to: str | Path | None = None, **extra: Any) -> Path:
    """Write ``{"format", "config", "model", **extra}`` atomically, hard-linked to ``mirror_to`` when
    given (``mirror_path``). Refuses (``PoisonedCheckpointError``) when any tensor (weights, optimizer
    state, EMA, ...) is NaN or infinite, and raises ``DiskFullError`` on a full disk; either way the
    file already at ``path`` is left untouched and no temporary file stays behind."""
    path = Path(path)
    payload = {"format": FORMAT, "config": model.config.to_dict(), "model": model.state_dict(), **extra}
    bad = non_finite_tensors(payload)
    if bad:
        raise PoisonedCheckpointError(
            f"refusing to write checkpoint {path}: {len(bad)} tensor(s) hold NaN or infinite "
            f"values ({_name_some(bad)}); the file on disk is left untouched"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
        if mirror_to is not None:
            mirror(path, mirror_to)
    except BaseException as e:  # a full disk, Ctrl-C mid-write, ...: never leave a partial .tmp
        tmp.unlink(missing_ok=True)
        if (isinstance(e, OSError) and e.errno == errno.ENOSPC) or _torch_write_failed(e):
            needed = sum(t.numel() * t.element_size() for _, t in _tensors(payload))
            try:
                free = shutil.disk_usage(path.parent).free
            except OSError:
                free = None
            raise DiskFullError(path, needed, free) from e
        raise
    return path


# torch.save's zip writer reports a failed write (a full disk: the file stops growing) without an
# errno: "[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", or for a small
# payload "basic_ios::clear: iostream error", or "PytorchStreamWriter failed writing file ...".
_TORCH_WRITE_FAILED = ("unexpected pos", "iostream error", "PytorchStreamWriter failed writing")


def _torch_write_failed(e: BaseException) -> bool:
    """Whether ``e`` is torch.save's own form of a write that did not reach the disk (no errno;
    a full disk is its cause in practice), not an error of the payload."""
    return isinstance(e, RuntimeError) and any(m in str(e) for m in _TORCH_WRITE_FAILED)


def load_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no checkpoint at {path}; train the model first (`dvc repro`)")
    size = path.stat().st_size
    if size == 0:
        raise DamagedCheckpointError(path, "empty, 0 bytes")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:  # a truncated file or a foreign pickle
        why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DamagedCheckpointError(path, f"{size} bytes, truncated or not a checkpoint: {why}") from e
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise DamagedCheckpointError(path, f"not a nac checkpoint of format {FORMAT}")
    bad = non_finite_tensors(ckpt)
    if bad:
        raise PoisonedCheckpointError(
            f"checkpoint {path} holds NaN or infinite values in {len(bad)} tensor(s) ({_name_some(bad)}): the training "
            "that wrote it diverged. Delete it and retrain (`dvc repro`; a rerun of the training moves it aside "
            "itself), with a lower train.lr or train.grad_clip set if it diverges again"
        )
    return ckpt


def load_model(path: str | Path, map_location: str | torch.device = "cpu", expect_config: dict | None = None) -> NAC:
    """Rebuild the model from the stored config and load its weights (strictly): the EMA
    weights when training kept an EMA (they are what training evaluated), else the raw ones.

    ``expect_config``: the model config the current params ask for (``ModelConfig.to_dict()``);
    a checkpoint trained with another one is refused (``CheckpointMismatchError``) instead of
    silently evaluating a stale model."""
    ckpt = load_checkpoint(path, map_location)
    if expect_config is not None:
        diff = config_diff(stored_config(ckpt), expect_config)
        if diff:
            raise CheckpointMismatchError(
                f"checkpoint {path} was trained with another model config than the current params ask for "
                f"(differing keys: {'; '.join(diff)}); retrain it with the current params (`dvc repro`, which reruns "
                "the training stage), or restore the params it was trained with"
            )
    model = build_model(stored_config(ckpt), fit_signatures=False)  # fitted signatures come from the state dict
    model.load_state_dict(model_weights(ckpt))
    return model


def stored_config(ckpt: dict[str, Any]) -> dict:
    """The checkpoint's model config without the ``RETIRED_CONFIG_KEYS``."""
    return {k: v for k, v in (ckpt.get("config") or {}).items() if k not in RETIRED_CONFIG_KEYS}


def model_weights(ckpt: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The weights to evaluate: the EMA copy's (``AveragedModel`` state, ``module.`` prefix) if any."""
    if "ema" in ckpt:
        return {k[len("module.") :]: v for k, v in ckpt["ema"].items() if k.startswith("module.")}
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
    return text if len(text) <= limit else text[: limit - 3] + "..."


def dict_diff(stored: dict, expected: dict, stored_name: str = "checkpoint", expected_name: str = "now") -> list[str]:
    """``"key: checkpoint X, now Y"`` for every key whose value differs (a missing key reads as
    ``<absent>``), in sorted key order; empty when the dicts agree."""
    absent = "<absent>"
    out = []
    for k in sorted(set(stored) | set(expected), key=str):
        a, b = stored.get(k, absent), expected.get(k, absent)
        if a != b:
            out.append(
                f"{k}: {stored_name} {a if a is absent else _short(a)}, {expected_name} "
                f"{b if b is absent else _short(b)}"
            )
    return out


def config_diff(stored: dict, expected: dict) -> list[str]:
    """The differing keys of two model configs (generic: any field, current defaults filled in)."""
    return dict_diff(_normalized_config(stored), _normalized_config(expected), "checkpoint", "params")


# Resume state that `dvc checkout` cannot delete: every checkpoint a stage writes under models/ is
# also hard-linked (no extra space) to the same relative path under .nac/resume/, a folder DVC does
# not manage. `dvc checkout` (or `git checkout` with DVC's hooks) replaces models/ with the cached
# outputs of the commit checked out, deleting a checkpoint of a run not finished yet; the next
# training of it restores it from the mirror and resumes. `rm -rf .nac/resume` forgets them all.
# The training stages pass it (relative to the repository root they run in); the library mirrors
# only where it is given a mirror.
RESUME_DIR = Path(".nac/resume")


def mirror_path(path: str | Path, models: str | Path, resume: str | Path = RESUME_DIR) -> Path | None:
    """Where checkpoint ``path`` under the checkpoints' root ``models`` is mirrored:
    ``<resume>/<models' name>/<path under models>`` (``models`` -> ``.nac/resume/models/...``);
    None when ``path`` is not under ``models``."""
    try:
        root = Path(models).resolve()
        rel = Path(path).resolve().relative_to(root)
    except (ValueError, OSError):
        return None
    return Path(resume) / root.name / rel


def mirror(path: str | Path, dest: str | Path) -> Path | None:
    """Hard-link checkpoint ``path`` to its mirror ``dest`` (replacing the previous one); None when
    the file system refuses (the checkpoint itself is written either way)."""
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".tmp")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        os.link(path, tmp)
        os.replace(tmp, dest)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    return dest


def restore(path: str | Path, src: str | Path | None) -> Path | None:
    """Put back a checkpoint that was deleted after it was written (``dvc checkout``) from its
    mirror ``src``; returns the mirror it came from, None when there was nothing to restore."""
    path, src = Path(path), None if src is None else Path(src)
    if path.exists() or src is None or not src.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, path)
    except OSError:
        shutil.copy2(src, path)
    return src


def _unmirror(path: Path, dest: str | Path | None) -> None:
    """Forget the mirror ``dest`` of a checkpoint being moved aside (when it is that same file)."""
    dest = None if dest is None else Path(dest)
    try:
        if dest is not None and dest.exists() and os.path.samefile(dest, path):
            dest.unlink()
    except OSError:
        pass


def aside_path(path: str | Path, tag: str = "stale") -> Path:
    """A free name next to ``path`` for moving it aside: ``<name>.<tag>-<YYYYmmdd-HHMMSS>[-N]``."""
    path = Path(path)
    base = path.with_name(f"{path.name}.{tag}-{time.strftime('%Y%m%d-%H%M%S')}")
    dest, n = base, 1
    while dest.exists():
        n += 1
        dest = base.with_name(f"{base.name}-{n}")
    return dest


def move_aside(
    path: str | Path, dest: str | Path | None = None, tag: str = "stale", mirror_to: str | Path | None = None
) -> Path:
    """Rename ``path`` to ``dest`` (or a fresh ``aside_path``), never overwriting, forgetting its mirror
    ``mirror_to`` (when given); returns the new path."""
    path = Path(path)
    dest = Path(dest) if dest is not None and not Path(dest).exists() else aside_path(path, tag)
    _unmirror(path, mirror_to)
    os.replace(path, dest)
    return dest
