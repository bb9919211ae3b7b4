"""A series' style (colour, marker) is a function of its name alone: the names the committed report
draws keep their place in ``_ORDER`` (so the committed figures keep their colours), and a name not
listed gets the same style whatever was drawn before it."""

import json

import seaborn as sns

from nac.repo import ROOT
from nac.report import style

METRICS = ROOT / "metrics"


def _committed_runs() -> set[str]:
    """Every run the committed report draws a series of: the image ladder (eval files, pruning), the
    tracks, few-shot rows and the convergence runs beside them."""
    names = {f.name.rsplit("-", 1)[0] for f in (METRICS / "image" / "eval").glob("*.json")}
    names |= {f.name.rsplit("-", 1)[0] for f in (METRICS / "tracks").glob("*/*.json")}
    names |= {r["run"] for r in json.loads((METRICS / "image" / "prune.json").read_text())}
    for f in (METRICS / "fewshot").glob("*.json"):
        names |= {r["run"] for r in json.loads(f.read_text())["rows"]}
    conv = ROOT / "bench" / "results" / "convergence.json"
    if conv.is_file():
        names |= set(json.loads(conv.read_text()).get("runs") or {})
    return names


def test_every_committed_run_keeps_its_listed_colour_and_marker():
    names = _committed_runs()
    assert {"perceiver_io", "nac-scale_free", "nac"} <= names  # the files were found
    colours = sns.color_palette(style.PALETTE, 10)
    for name in names:
        base = name.removesuffix("-noreg").removesuffix("-randinit")
        assert base in style._ORDER, f"{name}: not in style._ORDER (its colour would come from a hash)"
        if base == name:
            i = style._ORDER.index(name)
            got = style.series_style(name)
            assert got["color"] == colours[i % 10] and got["marker"] == style._MARKERS[i % 8], name
            assert style.series_style(f"{name}|random")["color"] == got["color"]


def test_an_unlisted_name_has_one_style_whatever_was_drawn_before():
    names = ["zeta", "alpha", "nac-new_prior", "run with spaces"]
    first = {n: style.series_style(n) for n in names}
    second = {n: style.series_style(n) for n in reversed(names)}
    assert first == second
    for n in names:
        i = style._index(n)
        assert len(style._ORDER) <= i < len(style._ORDER) + style._STYLES
        assert i == style._index(n)
