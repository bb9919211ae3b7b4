"""DVC stage report: tables, figures, the index README and claims.md under reports/ from metrics/."""
from nac.pipeline.params import load_params
from nac.report.build import build_report


def main() -> None:
    build_report(load_params())  # reads metrics/: the training sections were validated by their stages


if __name__ == "__main__":
    main()
