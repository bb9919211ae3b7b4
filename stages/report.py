"""DVC stage report: tables, figures and the index README under reports/ from metrics/."""
from nac.pipeline.params import load_params
from nac.report.build import build_image_report


def main() -> None:
    build_image_report(load_params())


if __name__ == "__main__":
    main()
