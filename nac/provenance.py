"""Where a result set came from, and whether it still matches the code and params beside it.

A result set kept apart from ``metrics/`` (``results/converged/``, written by
``tools/run_converged.py``) holds ``params.yaml`` (the composed params it ran), ``dvc.lock`` (the
run's lock), ``metrics/`` and ``provenance.json``: the profile and overrides, the commit, the
params' hash, the code fingerprint, the machine, the device, and the start and end times.

The code fingerprint (``code_fingerprint``) hashes what the pipeline's stages run: the ``nac``
sources the stage scripts import, followed through every import (``nac.imports.reached``, the
walk dvc.yaml's deps and a checkpoint's fingerprint use), the stage scripts and ``dvc.yaml``; ``conf/`` is
checked through the params it composes. ``check`` recomputes all of it from a checkout and names
every difference.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

from nac.imports import reached
from nac.pipeline.params import compose, read_params

PROVENANCE = "provenance.json"
RESULTS = Path("results/converged")  # the converged profile's result set (docs/convergence.md)
COMMAND = "python tools/run_converged.py --budget MINUTES"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def params_hash(params: dict[str, Any]) -> str:
    """sha256 of the params as canonical JSON (sorted keys): the same for any YAML layout."""
    return _sha256(json.dumps(params, sort_keys=True, separators=(",", ":")).encode())


def code_fingerprint(root: str | Path = ".") -> dict[str, str]:
    """``{"nac": ..., "stages": ..., "dvc.yaml": ...}``: sha256 each, over the relative paths and
    bytes of the ``nac`` sources the stages import (every import followed, ``nac.imports.reached``),
    of ``stages/*.py`` and of ``dvc.yaml``."""
    root = Path(root)
    stages = sorted((root / "stages").glob("*.py"))

    def digest(files: list[Path], base: Path) -> str:
        h = hashlib.sha256()
        for f in files:
            h.update(f.relative_to(base).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        return h.hexdigest()

    return {
        "nac": digest(sorted(reached(root, stages)), root / "nac"),
        "stages": digest(stages, root),
        "dvc.yaml": digest([root / "dvc.yaml"], root),
    }


def git_commit(root: str | Path = ".") -> dict[str, Any]:
    """``{"commit": <HEAD sha or None>, "dirty": <uncommitted changes in nac, stages, conf, dvc.yaml>}``.
    ``root`` must be the top of its own repository: a copy without a ``.git`` of its own inside another
    repository (the device tool's copy, say) gets ``None``, not the commit of the repository around it."""
    try:
        top = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True, check=True
        )
        if Path(top.stdout.strip()).resolve() != Path(root).resolve():
            return {"commit": None, "dirty": None}
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "nac", "stages", "conf", "dvc.yaml"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}


def read(results: str | Path = RESULTS) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(params, provenance)`` of a result set, or ``None`` when it holds no ``provenance.json``."""
    results = Path(results)
    if not (results / PROVENANCE).is_file():
        return None
    prov = json.loads((results / PROVENANCE).read_text(encoding="utf-8"))
    params = read_params(results / "params.yaml")
    return params, prov


def check(results: str | Path = RESULTS, root: str | Path = ".") -> list[str]:
    """Every way the result set at ``results`` disagrees with the checkout at ``root``: its
    params.yaml against its recorded hash and against ``conf/`` composed again with its profile and
    overrides, its code fingerprint against the checkout's. Empty: they match. Raises
    ``FileNotFoundError`` when ``results`` holds no provenance."""
    results, root = Path(results), Path(root)
    got = read(results)
    if got is None:
        raise FileNotFoundError(f"{results / PROVENANCE} does not exist; run `{COMMAND}` to make it")
    params, prov = got
    problems = []
    if params_hash(params) != prov["params_sha256"]:
        problems.append(f"{results / 'params.yaml'} does not hash to provenance.json's params_sha256")
    overrides = [f"profile={prov['profile']}", *prov.get("overrides", [])]
    try:
        composed = compose(overrides, conf_dir=root / "conf")
    except Exception as e:  # Hydra's errors: a profile or key conf/ no longer has
        composed = {"error": str(e)}
    if params_hash(composed) != prov["params_sha256"]:
        problems.append(
            f"conf/ composed with {' '.join(overrides)} differs from "
            f"the params the results ran ({results / 'params.yaml'}); rerun `{COMMAND}`"
        )
    now = code_fingerprint(root)
    for part, digest in prov["code"].items():
        if now.get(part) != digest:
            problems.append(f"the code's {part} fingerprint differs from the one the results ran; rerun `{COMMAND}`")
    return problems
