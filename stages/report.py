"""DVC stage report: tables, figures, the index README and claims.md under reports/ from metrics/."""
from nac.report.build import build_report
from nac.tracks.params import load_all_params


def main() -> None:
    build_report(load_all_params())


if __name__ == "__main__":
    main()
