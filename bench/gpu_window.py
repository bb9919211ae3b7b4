"""One prepared GPU window (issue 35): the command line of ``nac.bench.window``, whose docstring
(``--help``) says what each part measures and what the output folder holds.

    python bench/gpu_window.py --out "$OUT"          # or set $OUT and leave --out out
    python bench/gpu_window.py --plan                # what would run in the window, no GPU needed
    python bench/gpu_window.py --cpu-dry-run --out /tmp/window   # every part, tiny, on the CPU
"""

from __future__ import annotations

import sys

from nac.bench.window import main

if __name__ == "__main__":
    sys.exit(main())
