"""DVC stage report: tables, figures, the index README and claims.md under reports/ from metrics/.
Every metrics file is checked before anything is written, and the outputs replace the previous
ones only once all are built (``nac.report.build``)."""

import sys

from nac.metrics_io import MetricsError
from nac.pipeline.params import load_params
from nac.report.build import build_report


def main() -> None:
    build_report(load_params())


if __name__ == "__main__":
    try:
        main()
    except MetricsError as e:
        sys.exit(f"report: {e}")
