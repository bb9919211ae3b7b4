"""dvc.lock without the entries of stages dvc.yaml no longer defines.

    python tools/prune_lock.py          # drop them (dvc.lock rewritten by DVC's own YAML writer)
    python tools/prune_lock.py --check  # exit 1 naming them, change nothing

DVC keeps a stage's lock entry after the stage leaves dvc.yaml (a renamed stage, a ``foreach``
whose items changed, a profile with fewer runs), and it parses and rewrites the whole of
dvc.lock each time a stage finishes, several times more under ``dvc exp run``: stale entries
(once 110 of 123, 450 of its 516 KB) cost every stage that time (docs/costs.md).
``tests/test_dvc_deps.py`` runs the check. The stages are those DVC itself lists for the current
``params.yaml`` (``foreach`` expanded), so run it after ``python -m nac.compose`` for the
profile whose lock you commit.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def stale_entries(root: Path = Path(".")) -> list[str]:
    """Names in ``root/dvc.lock`` of stages ``root/dvc.yaml`` does not define (as DVC expands it)."""
    import yaml
    from dvc.repo import Repo

    lock = root / "dvc.lock"
    if not lock.exists():
        return []
    locked = (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}
    with Repo(str(root)) as repo:
        defined = {stage.name for stage in repo.index.stages if stage.relpath.endswith("dvc.yaml")}
    return sorted(set(locked) - defined)


def prune(root: Path = Path(".")) -> list[str]:
    """Drop ``stale_entries`` from ``root/dvc.lock``; returns their names."""
    from dvc.utils.serialize import modify_yaml

    stale = stale_entries(root)
    if stale:
        with modify_yaml(root / "dvc.lock") as data:
            for name in stale:
                del data["stages"][name]
    return stale


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="name the stale entries and exit 1; change nothing")
    a = ap.parse_args()
    if a.check:
        stale = stale_entries()
        if stale:
            print(
                f"dvc.lock holds {len(stale)} entries of stages dvc.yaml does not define: {', '.join(stale[:8])}"
                f"{' ...' if len(stale) > 8 else ''}; run python tools/prune_lock.py",
                file=sys.stderr,
            )
            return 1
        print("dvc.lock: every entry is a stage of dvc.yaml")
        return 0
    stale = prune()
    print(
        f"dvc.lock: dropped {len(stale)} entries of stages dvc.yaml does not define"
        if stale
        else "dvc.lock: nothing to drop"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
