"""docs/design.md lists the route from the train stage to ``optimizer.step()`` with file:line
(issue 48); each reference must still point at the call it names, so the list cannot rot."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# (file, the call the route's line names): the doc must cite the line that holds it
ROUTE = [
    ("stages/train.py", "run_jobs("),
    ("nac/pipeline/pool.py", "results[i] = fn(*job, progress=True)"),
    ("nac/pipeline/pool.py", "workers.give(w, i, (i, fn, jobs[i], threads))"),
    ("nac/pipeline/pool.py", "answer = (index, True, fn(*args, progress=True))"),
    ("nac/tracks/image.py", "out = fit("),
    ("nac/training/loop.py", "train_step(run, now, batch, epoch, i)"),
    ("nac/training/loop.py", "run.optimizer.step()"),
]


def _line_of(path: str, text: str) -> int:
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    hits = [i for i, line in enumerate(lines, start=1) if text in line and not line.lstrip().startswith(("#", "``"))]
    assert hits, f"{path} no longer holds {text!r}: update the route in docs/design.md and this test"
    return hits[0]


def test_the_documented_route_points_at_its_calls():
    doc = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = doc.split("### The route from the stage to `optimizer.step()`", 1)[1].split("\n#", 1)[0]
    cited = set(re.findall(r"((?:stages|nac)/[\w/]+\.py):(\d+)", section))
    for path, text in ROUTE:
        line = _line_of(path, text)
        assert (path, str(line)) in cited, (
            f"docs/design.md's route should cite {path}:{line} ({text!r}); it cites "
            f"{sorted(f'{p}:{n}' for p, n in cited if p == path)}"
        )
