"""The run gate (issue 50, item 3; docs/run-gate.md): a run that did not train is flagged against its
peers and the schedule, shown with its reasons and numbers, kept in the primary analysis, and each
claim that reads it is judged again without its seed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from nac.converged import pieces as P
from nac.pipeline.params import compose
from nac.report.claims import evaluate_claims, gate, write_claims
from nac.report.claims.metrics import Metrics
from nac.report.claims.registry import Context, registered

ROOT = Path(__file__).resolve().parents[1]
# the first benchmark's converged run, kept as its record (nac.converged.records): pieces and the params they ran under
RECORD = ROOT / "results" / "converged" / "records" / "benchmark1"
PIECES = RECORD / "pieces"  # <profile>/<track>/<run>-<seed>/


def _cosine(epochs: int, peak: float = 5e-4) -> list[float]:
    return [peak * 0.5 * (1 + math.cos(math.pi * e / epochs)) for e in range(1, epochs + 1)]


def _curve(epochs: int, final: float, rise_at: int) -> list[float]:
    """Train accuracy from chance (10%) rising after ``rise_at`` to ``final`` (a logistic in the epoch)."""
    return [10 + (final - 10) / (1 + math.exp(-(e - rise_at) / 3)) for e in range(1, epochs + 1)]


def test_the_committed_pieces_flag_perceiver_io_seed_1_and_no_other_image_piece(tmp_path):
    """The first benchmark's converged run: Perceiver IO seed 1 (train accuracy 91.9% against
    99.2-99.6%) is flagged; the other 54 image pieces are not (the Modular Network, 39-46% in every
    seed, included: its seeds agree)."""
    params = json.loads((RECORD / "record.json").read_text())["params"]
    image = [p for p in P.plan(params) if p.track == "image"]
    written = [p for p in P.plan(params) if P.read(PIECES, "converged", p) is not None]
    assert len(image) == 55 and set(image) <= set(written)
    P.assemble(PIECES, "converged", params, written, tmp_path)
    records = gate.training_records(tmp_path, params)
    assert sum(1 for k in records if k[0] == "image") == 55
    flags, unjudged = gate.judge(records)
    image_flags = [f for f in flags if f.group == "image"]
    assert [(f.run, f.seed) for f in image_flags] == [("perceiver_io", 1)] and not unjudged
    f = image_flags[0]
    assert f.final == pytest.approx(91.9, abs=0.05) and f.peers_median == pytest.approx(99.55, abs=0.05)
    assert f.margin == 2.0 and f.reached_epoch is None and f.reasons[0] == "behind its peers"
    # every claim that reads Perceiver IO seed 1 gets its sensitivity row, the others none
    rows = {r["id"]: r for r in evaluate_claims(params, tmp_path, flags=image_flags)}
    s = rows["iid_gain"]["sensitivity"]
    assert s["without"] == ["image perceiver_io seed 1"] and s["seeds"] == [0, 2, 3, 4] and s["n"] == 4
    assert rows["iid_gain"]["n"] == 5  # the primary analysis keeps every seed
    assert rows["regularizer_sparse"]["sensitivity"] is None  # NACs only: it reads no Perceiver IO run


def _write(root: Path, group: str, run: str, seed: int, acc: list[float], lr: list[float], **extra) -> None:
    d = root / ("image/train" if group == "image" else group)
    d.mkdir(parents=True, exist_ok=True)
    hist = [{"epoch": i + 1, "train_acc": a, "lr": x} for i, (a, x) in enumerate(zip(acc, lr))]
    (d / f"{run}-{seed}.json").write_text(json.dumps({"history": hist, **extra}))


def test_a_run_behind_its_peers_is_flagged_with_its_numbers():
    lr = _cosine(40)
    recs = {("image", "m", s): (_curve(40, 99.0 + 0.1 * s, 8), lr) for s in range(5)}
    recs[("image", "m", 3)] = (_curve(40, 90.0, 20), lr)  # learned late, never caught up
    flags, unjudged = gate.judge(recs)
    assert [(f.run, f.seed) for f in flags] == [("m", 3)] and not unjudged
    f = flags[0]
    assert f.reasons == ("behind its peers", "did not reach its peers' level before the anneal")
    assert f.peers_median == pytest.approx(99.2, abs=0.1) and f.margin == 2.0 and f.reached_epoch is None
    assert "m seed 3" in f.text() and f"{f.final:.1f}% against its peers' median {f.peers_median:.1f}%" in f.text()


def test_a_run_that_catches_up_only_in_the_anneal_is_flagged_and_one_that_agrees_with_its_peers_is_not():
    lr = _cosine(40)  # below 10% of the peak from epoch 33
    annealed = next(i + 1 for i, x in enumerate(lr) if x < 0.1 * max(lr))
    recs = {("tracks/points", "nac", s): (_curve(40, 95.0, 8), lr) for s in range(4)}
    late = [10.0] * 34 + [95.0] * 6  # at chance until after the anneal, then at its peers' level
    recs[("tracks/points", "nac", 4)] = (late, lr)
    flags, _ = gate.judge(recs)
    assert [(f.seed, f.reasons) for f in flags] == [(4, ("did not reach its peers' level before the anneal",))]
    assert flags[0].reached_epoch == 35 and flags[0].annealed_epoch == annealed < 35
    # seeds that agree at a low accuracy (a model that never fits) are not "did not train"
    low = {("image", "mn", s): (_curve(40, 40.0 + 2 * s, 10), lr) for s in range(5)}
    assert gate.judge(low) == ([], [])


def test_a_model_with_too_few_peers_is_said_not_judged():
    lr = _cosine(10)
    flags, unjudged = gate.judge({("image", "m", s): (_curve(10, 50.0 + 30 * s, 3), lr) for s in range(2)})
    assert flags == [] and unjudged == ["image m: 2 seed(s), fewer than 2 peers each: not judged"]


def test_a_malformed_training_record_names_its_file(tmp_path):
    params = {"seeds": [0], "image": {"ladder": ["perceiver_io"]}}
    (tmp_path / "image/train").mkdir(parents=True)
    (tmp_path / "image/train/perceiver_io-0.json").write_text(json.dumps({"history": [{"train_acc": "x", "lr": 1}]}))
    with pytest.raises(ValueError, match=r"perceiver_io-0\.json: an epoch without a numeric train_acc/lr"):
        gate.training_records(tmp_path, params)


def test_the_sensitivity_drops_the_flagged_seed_from_both_arms_and_claims_md_shows_it(tmp_path):
    """A paired image claim (iid_gain) read with a flagged Perceiver IO seed: its primary row keeps the
    seed, its sensitivity is the same claim at the other seeds; claims.md lists the flagged run and the
    claim's line; a claim that reads only other runs has none."""
    params = compose(["profile=mini"])
    seeds, head = params["seeds"], f"nac-{params['prior']['name']}"
    lr = _cosine(6)
    for run in params["image"]["ladder"]:
        for s in seeds:
            final = 60.0 if (run == "perceiver_io" and s == seeds[1]) else 95.0 + 0.5 * s
            _write(tmp_path, "image", run, s, [final] * 6, lr, parameters=1000)
            (tmp_path / "image/eval").mkdir(parents=True, exist_ok=True)
            iid = {"perceiver_io": [90.0, 50.0, 91.0], head: [92.0, 93.0, 92.5]}.get(run, [90.0, 90.0, 90.0])
            ev = {"iid_acc1": iid[seeds.index(s)], "ood_acc1": 40.0, "ood_acc5": 80.0, "iid_acc5": 99.0}
            (tmp_path / f"image/eval/{run}-{s}.json").write_text(json.dumps(ev))
    flags, _ = gate.judge(gate.training_records(tmp_path, params))
    assert [(f.run, f.seed) for f in flags] == [("perceiver_io", seeds[1])]
    rows = {r["id"]: r for r in evaluate_claims(params, tmp_path)}
    iid = rows["iid_gain"]
    assert iid["n"] == 3 and iid["estimate"] == pytest.approx((2 + 43 + 1.5) / 3)
    s = iid["sensitivity"]
    assert s["seeds"] == [seeds[0], seeds[2]] and s["n"] == 2 and s["estimate"] == pytest.approx((2 + 1.5) / 2)
    assert rows["priors_similar"]["sensitivity"] is None  # NACs of the ladder only
    # the same numbers as the claim judged on a tree without the flagged seed at all
    m = Metrics(tmp_path, params)
    m.seeds = [seeds[0], seeds[2]]
    alone = next(c for c in registered() if c.name == "iid_gain").row(Context(params, m), "iid_gain", ())
    assert (alone["estimate"], alone["lo"], alone["hi"], alone["verdict"]) == (
        s["estimate"],
        s["lo"],
        s["hi"],
        s["verdict"],
    )
    md = write_claims(params, tmp_path, tmp_path / "out", rows=list(rows.values())).read_text()
    assert (
        "## Runs that did not train (the run gate)" in md
        and f"image perceiver_io seed {seeds[1]}: behind its peers" in md
    )
    section = md[md.index("### iid_gain") : md.index("### ", md.index("### iid_gain") + 4)]
    assert (
        f"*Without the runs that did not train* (the run gate): without image perceiver_io seed {seeds[1]}:" in section
    )


def test_a_sensitivity_left_with_one_seed_is_undecided_not_a_single_measurement(tmp_path):
    """Dropping the flagged seeds may leave one seed: no interval, so the sensitivity is undecided
    (a single measurement above chance must not read as 'supported')."""
    params = compose(["profile=mini"])
    seeds = params["seeds"]
    rows = evaluate_claims(params, tmp_path, flags=[])  # nothing measured, nothing flagged
    assert all(r["sensitivity"] is None for r in rows)
    lr = _cosine(5)
    for track in ("points", "listops", "text", "nlvr"):
        for run in params[track]["runs"]:
            for s in seeds:
                bad = (track, s) in {("points", seeds[1]), ("text", seeds[2])}
                _write(
                    tmp_path,
                    f"tracks/{track}",
                    run,
                    s,
                    [20.0 if bad else 90.0] * 5,
                    lr,
                    test_acc1=80.0 + s,
                    test_chance=10.0,
                )
    flags, _ = gate.judge(gate.training_records(tmp_path, params))
    assert {(f.group, f.seed) for f in flags} == {("tracks/points", seeds[1]), ("tracks/text", seeds[2])}
    row = next(r for r in evaluate_claims(params, tmp_path) if r["id"] == "above_chance")
    assert row["n"] == 3 and row["sensitivity"]["seeds"] == [seeds[0]]
    assert row["sensitivity"]["verdict"] == "undecided" and row["sensitivity"]["estimate"] is None
