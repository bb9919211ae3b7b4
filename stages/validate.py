"""DVC stage validate: params.yaml in full (every section, as the composer checks it) before any
other stage runs. Every stage depends on its output, so DVC runs it first, and a bad override
(``dvc exp run -S +image.train.epocs=2``) fails here, naming the key, before DVC removes any
stage's outputs. The output never changes with the params (a fixed line), so a change of one
param still reruns only the stages that read it."""

import sys
from pathlib import Path

from nac.compose import load_all_params
from nac.pipeline.lifeline import foreign_nac
from nac.pipeline.params import ParamsError

OUT = Path("params.validated")
MARK = "params.yaml validated in full by stages/validate.py (nac.compose.validate_all)\n"


def main() -> None:
    try:
        load_all_params("params.yaml")
    except (ParamsError, FileNotFoundError) as e:
        print(
            f"error: {e}\nNo stage ran and no output was removed; fix params.yaml (or the -S override) and rerun.",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    OUT.write_text(MARK, encoding="utf-8")


if __name__ == "__main__":
    foreign_nac(main, "validate")  # a nac other than this checkout's: one line, no run
    main()
