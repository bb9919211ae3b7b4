"""DVC stage notebooks: execute every notebooks/*.py (jupytext percent format) in a fresh kernel
with the current directory (the repository root) as working directory; writes
reports/notebooks/<name>.ipynb (with outputs) and <name>.html. A failing cell fails the stage
with the notebook's name and the cell's traceback."""

import argparse

from nac.pipeline.lifeline import foreign_nac
from nac.report.notebooks import execute_all


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--src", default="notebooks", help="folder of percent-format notebooks")
    ap.add_argument("--out", default="reports/notebooks", help="folder for the executed .ipynb and .html")
    ap.add_argument("--timeout", type=int, default=600, help="seconds allowed per cell")
    args = ap.parse_args()
    for r in execute_all(args.src, args.out, cwd=".", timeout=args.timeout):
        print(f"{r['name']}: executed in {r['seconds']:.1f} s -> {r['ipynb']}, {r['html']}")


if __name__ == "__main__":
    foreign_nac(main, "notebooks")  # a nac other than this checkout's: one line, no run
    main()
