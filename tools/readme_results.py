"""Rewrite the repository README's results block from the committed report (reports/tables/claims.csv,
written by the `report` stage) and nac/report/findings.yaml; `--check` exits 1 if it is stale.

    python tools/readme_results.py           # after `dvc repro`: the README's results follow the run
    python tools/readme_results.py --check   # tests/test_findings.py runs this check
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nac.pipeline.params import read_params  # noqa: E402
from nac.report import findings  # noqa: E402
from nac.report.claims import registered  # noqa: E402


def block(root: Path = ROOT) -> str:
    rows = findings.read_rows(root / "reports" / "tables" / "claims.csv")
    if rows is None:
        raise SystemExit(
            "readme_results: reports/tables/claims.csv is absent; run `dvc repro` (the report stage) first"
        )
    params = read_params(root / "params.yaml")
    converged = findings.read_rows(root / "reports" / "converged" / "tables" / "claims.csv")
    from nac.converged.records import all_records, read

    records = [
        (d.name, read(d)["title"], findings.read_rows(root / "reports" / "records" / d.name / "tables" / "claims.csv"))
        for d in all_records(root / "results" / "converged")
    ]
    return findings.readme_results(
        rows, [c.name for c in registered()], params["profile"], params["seeds"], converged=converged, records=records
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md's block is stale, write nothing")
    args = ap.parse_args()
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    new = findings.replace_block(text, block())
    if args.check:
        if new != text:
            sys.exit("README.md: the results block is stale; run `python tools/readme_results.py`")
        return
    readme.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
