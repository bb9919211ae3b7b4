"""Issue 46: verdicts that say how much evidence they have. Each claim carries the test that decided
it (its interval), the power of that test (n, the smallest effect it detects at 80%, the units at
which the effect of interest would be decided; statsmodels' and scipy's t distributions), an
undecided verdict says whether it is underpowered or lies within δ, every δ has its one-line reason
and none is below the test set's noise floor, the ``_long`` claims leave a profile at its plateau,
and the pieces record the commit that ran and every stretch of a resumed computation."""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
from statsmodels.stats.power import TTestPower
from test_claims import by_id, good_spec, make_params, write_metrics

import nac.report.claims as C
from nac.report import findings
from nac.report.claims import deltas, power
from nac.report.claims.registry import registered
from nac.report.claims.rules import UNDECIDED, _result, combine, difference_verdict, part
from nac.stats import paired_ci

ROOT = Path(__file__).resolve().parents[1]


def test_the_sd_behind_an_interval_and_the_detectable_effect_are_statsmodels_own():
    rng = np.random.default_rng(0)
    d = rng.normal(1.0, 7.2, size=5)
    iv = paired_ci(d, np.zeros(5))
    sd = power.sd_of(iv.estimate, iv.lo, iv.hi, iv.n)
    assert sd == pytest.approx(np.std(d, ddof=1), rel=1e-9)  # the t interval's SD, recovered
    det = power.detectable("difference", sd, 5)
    assert TTestPower().power(effect_size=det / sd, nobs=5, alpha=0.05) == pytest.approx(0.8, abs=1e-6)
    need = power.needed("difference", 1.95, sd)
    assert TTestPower().solve_power(effect_size=1.95 / sd, alpha=0.05, power=0.8) == pytest.approx(need, rel=1e-4)


def test_equivalence_power_is_the_two_one_sided_tests():
    """At a true difference of 0 and a margin of 3 SE, each one-sided test at 0.025 rejects with the
    noncentral t's probability; the TOST power is their sum less one."""
    sd, n = 2.0, 10
    margin = 3 * sd / math.sqrt(n)
    one = stats.nct.sf(stats.t.ppf(0.975, n - 1), n - 1, margin / (sd / math.sqrt(n)))
    assert power.power_at("equivalence", margin, sd, n) == pytest.approx(2 * one - 1)
    assert power.power_at("equivalence", power.detectable("equivalence", sd, n), sd, n) == pytest.approx(0.8)


def test_an_undecided_claim_says_it_is_underpowered_and_by_how_much(tmp_path):
    spec = good_spec()
    spec["ood"]["nac-scale_free"] = [40.0, 60.0, 45.0]  # spread: the CI spans 0
    spec["ood"]["perceiver_io"] = [50.0, 40.0, 52.0]
    rows = by_id(C.evaluate_claims(make_params(), write_metrics(tmp_path / "m", spec)))
    r = rows["ood_gain"]
    assert r["verdict"] == UNDECIDED
    pw = r["power"]
    assert pw["n"] == 3 and pw["effect_from"] == "the paper's effect" and pw["effect"] == pytest.approx(1.95)
    assert pw["needed"] > 3 and "underpowered: needs about" in r["reason"]
    assert f"needs about {pw['needed']} units" in r["reason"]
    csv_row = next(x for x in findings.read_rows(_written(tmp_path, rows)) if x["id"] == "ood_gain")
    assert csv_row["power"]["needed"] == pw["needed"]  # through claims.csv: JSON, parsed back


def _written(tmp_path, rows) -> Path:
    out = tmp_path / "reports"
    C.write_claims(make_params(), out=out, rows=list(rows.values()))
    return out / "tables" / "claims.csv"


def test_an_undecided_estimate_inside_delta_says_so():
    iv = paired_ci([0.5, -2.4, 3.5, -1.0], [0.0] * 4)  # CI about [-3.5, +3.8]: reaches δ, contains 0
    row = _result(iv, difference_verdict(iv, 2.24), "ours")
    power.annotate(row, None)
    assert row["verdict"] == UNDECIDED and "lies within δ = 2.24" in row["power"]["why"]


def test_the_deciding_interval_is_the_subtest_that_decided():
    """regularizer_sparse's case: the headline interval excludes 0, another test is undecided; the
    claim's deciding test is that one, with its own interval, and the findings' evidence names it."""
    sparse = paired_ci([9.0, 9.5, 10.0, 8.8, 9.2], [0.0] * 5)
    shape = paired_ci([0.05, -0.02, 0.08, 0.01, 0.04], [0.0] * 5)
    tests = [part("sparser", difference_verdict(sparse, 0.0)), part("shape vs random", difference_verdict(shape, 0.0))]
    row = _result(sparse, combine(tests, "measures"), "ours", parts=tests)
    power.annotate(row, None)
    assert row["verdict"] == UNDECIDED and row["deciding"]["name"] == "shape vs random"
    assert (row["deciding"]["lo"], row["deciding"]["hi"]) == (pytest.approx(shape.lo), pytest.approx(shape.hi))
    assert row["lo"] == pytest.approx(sparse.lo)  # the headline is still the sparsity
    text = findings.evidence_text({**row, "verdict": UNDECIDED}, "pts")
    assert text.startswith("decided by shape vs random: ") and f"{shape.lo:+.3g}" in text and "(2 tests)" in text
    md = C.other_tests({**row})
    assert any("shape vs random" in line and "(decided)" in line for line in md) and len(md) == 3


def test_every_claim_has_its_delta_line_and_no_accuracy_delta_is_below_the_noise_floor():
    params = make_params()
    params["data"] = {"shapes": {"n_test": 1000}, "shapes_r": {"n_test": 1000}}
    params["image"].update(dataset="shapes", ood_dataset="shapes_r")
    for cl in registered():
        assert cl.delta, f"{cl.name} has no delta line"
    assert deltas.noise_floor(1000) == pytest.approx(100 * math.sqrt(0.5 / 1000))
    assert deltas.accuracy_delta(params, "ood") >= deltas.noise_floor(1000)
    assert deltas.accuracy_delta(params, "ood", practical=0.5) == pytest.approx(2.24)  # prior_tradeoff_ood's
    line = deltas.delta_line(params, "ood", practical=0.5, why="the paper's effect")
    assert "noise floor" in line and "1,000 test items" in line


def test_converged_profiles_have_no_long_claims_and_mini_keeps_them():
    from nac.pipeline.params import compose

    for profile, has in (("converged", False), ("converged_smoke", False), ("mini", True)):
        ids = set(C.claim_ids(compose([f"profile={profile}"])))
        assert ("ood_gain_long" in ids) is has and ("kernel_matters_long" in ids) is has, profile


# ---------------------------------------------------------------------------- provenance (item 5)
def test_a_copy_without_its_own_git_records_unknown_not_the_repository_around_it(tmp_path, monkeypatch):
    from nac.bench import window_measure
    from nac.converged import jobs
    from nac.provenance import git_commit

    outer = tmp_path / "outer"
    (outer / "copy").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(outer)], check=True)
    (outer / "f").write_text("x")
    subprocess.run([*git, "-C", str(outer), "add", "f"], check=True)
    subprocess.run([*git, "-C", str(outer), "commit", "-qm", "c"], check=True)
    assert git_commit(outer)["commit"] is not None
    assert git_commit(outer / "copy") == {"commit": None, "dirty": None}  # not the outer repository's
    monkeypatch.delenv("NAC_SOURCE_COMMIT", raising=False)
    assert jobs.source_commit({"code_root": str(outer / "copy")})["commit"] == "unknown"
    monkeypatch.setattr(window_measure, "ROOT", outer / "copy")
    monkeypatch.setattr(window_measure, "BENCH_FILES", ())
    monkeypatch.setattr(window_measure, "code_fingerprint", lambda root: {})
    got = window_measure.provenance(["profile=smoke"])
    assert got["commit"] == "unknown" and "no .git of its own" in got["commit_from"]


def _ctx(tmp_path) -> dict:
    return {
        "workdir": str(tmp_path / "work"),
        "pieces": str(tmp_path / "pieces"),
        "code_root": str(ROOT),
        "deadline": 1e12,
        "predicted": {},
        "stop": str(tmp_path / "stop"),
        "keep_checkpoint": False,
        "commit": {"commit": "abc", "dirty": False},
        "command": "test",
    }


def test_a_resumed_piece_records_every_stretch(tmp_path, monkeypatch):
    """A piece killed once (its stretch never ended; its checkpoint last written 20 s after it began)
    and resumed: the record lists both stretches, the first ended at its checkpoint's last write, and
    the total wall time is theirs together; the commit is the one read when the computation started."""
    from nac.converged import jobs
    from nac.converged import pieces as P
    from nac.pipeline.params import compose

    params = compose(["profile=converged_smoke"])
    piece = P.Piece("image", "perceiver_io", 0)
    rooted, models = jobs.in_work(params, tmp_path / "work")
    ckpt = jobs.checkpoint_of(piece, models)
    ckpt.parent.mkdir(parents=True)
    ckpt.write_bytes(b"checkpoint")
    began = 1_700_000_000.0
    os.utime(ckpt, (began + 20, began + 20))
    killed = {"machine": "gpu box", "device": "H100", "device_kind": "NVIDIA H100", "commit": "old", "dirty": False}
    jobs.Stretches(ckpt)._write([{**killed, "start": jobs._utc(began), "end": None, "wall_s": None}])

    def compute(params_, piece_, out, progress, models=None):
        (out / "train.json").write_text("{}")

    monkeypatch.setattr(jobs, "compute", compute)
    monkeypatch.setattr(jobs, "source_commit", lambda ctx: {"commit": "new", "dirty": False})
    rec = jobs.run_piece(params, piece.id, _ctx(tmp_path), progress=False)
    assert rec["resumed_from_checkpoint"] is True and rec["commit"] == "new"
    first, second = rec["stretches"]
    assert first["device_kind"] == "NVIDIA H100" and first["commit"] == "old" and first["wall_s"] == 20.0
    assert "checkpoint's last write" in first["end_from"]
    assert second["commit"] == "new" and second["end"] is not None
    assert rec["wall_s_total"] == pytest.approx(20.0 + second["wall_s"])
    assert not jobs.Stretches(ckpt).path.exists()  # gone with the checkpoint once written


def test_a_piece_whose_code_changes_while_it_runs_is_not_written(tmp_path, monkeypatch):
    from nac.converged import jobs
    from nac.converged import pieces as P
    from nac.pipeline.params import compose

    params = compose(["profile=converged_smoke"])
    prints = iter([{"code": "a", "params": "p"}, {"code": "b", "params": "p"}])
    monkeypatch.setattr(P, "fingerprint", lambda *a: next(prints))
    monkeypatch.setattr(jobs, "_LOADED", {})  # this process has run no piece yet
    monkeypatch.setattr(jobs, "compute", lambda p_, pc, out, progress, models=None: (out / "x.json").write_text("{}"))
    rec = jobs.run_piece(params, "image/perceiver_io-0", _ctx(tmp_path), progress=False)
    assert jobs.SKIPPED in rec and "the code on disk changed while it ran" in rec[jobs.SKIPPED]
    assert P.read(tmp_path / "pieces", "converged_smoke", P.Piece("image", "perceiver_io", 0)) is None


def test_a_worker_whose_code_changed_on_disk_since_it_imported_it_starts_no_piece(tmp_path, monkeypatch):
    """A worker runs the modules it imported with its first piece; a later piece whose files changed on
    disk since would run the old code under the new fingerprint: it is not started (one line)."""
    from nac.converged import jobs
    from nac.converged import pieces as P
    from nac.pipeline.params import compose

    params = compose(["profile=converged_smoke"])
    monkeypatch.setattr(jobs, "_LOADED", {(str(ROOT.resolve()), "image"): "the code of its first piece"})
    monkeypatch.setattr(jobs, "compute", lambda *a, **k: pytest.fail("must not compute"))
    rec = jobs.run_piece(params, "image/perceiver_io-0", _ctx(tmp_path), progress=False)
    assert "the code on disk changed since this worker imported it" in rec[jobs.SKIPPED]
    assert P.read(tmp_path / "pieces", "converged_smoke", P.Piece("image", "perceiver_io", 0)) is None


def test_the_report_says_what_the_equality_proofs_cover(tmp_path):
    from nac.converged import gpu_proof

    results = tmp_path / "converged"
    (results / "pieces").mkdir(parents=True)
    assert "The GPU path is not proven" in gpu_proof.summary(results, "converged")
    entry = {
        "piece": "image/nac-scale_free-0",
        "profile": "converged",
        "date": "2026-11-28T06:00:00Z",
        "gpu_device": "NVIDIA H100 80GB HBM3",
        "holds": True,
        "metrics": {"iid_acc1": {"gpu": 99.3, "cpu": 99.1, "difference": 0.2, "tolerance": 0.9}},
    }
    gpu_proof.record(results, entry)
    said = gpu_proof.summary(results, "converged")
    assert "image/nac-scale_free-0 (NVIDIA H100 80GB HBM3) recomputed on the CPU" in said and "holds" in said
    assert json.loads((results / gpu_proof.PROOF).read_text())[0]["piece"] == entry["piece"]


def test_the_gpu_proof_compares_by_the_seed_spread_or_the_binomial_floor(tmp_path):
    from nac.converged import gpu_proof
    from nac.converged import pieces as P
    from nac.pipeline.params import compose

    params = compose(["profile=converged_smoke"])
    root = tmp_path / "pieces"
    seeds = [int(s) for s in params["seeds"]]
    rows = [(99.0, 98.0, 50.0), (99.5, 98.5, 54.0), (99.2, 98.2, 52.0)][: len(seeds)]
    for s, (tr, iid, ood) in zip(seeds, rows):
        d = P.Piece("image", "nac-scale_free", s).path(root, params["profile"])
        d.mkdir(parents=True)
        (d / "train.json").write_text(json.dumps({"train_acc": tr}))
        (d / "eval.json").write_text(json.dumps({"iid_acc1": iid, "ood_acc1": ood, "iid_n": 1000, "ood_n": 1000}))
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "train.json").write_text(json.dumps({"train_acc": 99.1}))
    (cpu / "eval.json").write_text(json.dumps({"iid_acc1": 98.1, "ood_acc1": 60.0, "iid_n": 1000, "ood_n": 1000}))
    got = gpu_proof.compare(params, root, P.Piece("image", "nac-scale_free", seeds[0]), cpu)
    ood = got["metrics"]["ood_acc1"]
    sd = statistics.stdev(r[2] for r in rows)
    assert ood["sd_seeds"] == pytest.approx(sd) and ood["tolerance"] == pytest.approx(1.96 * math.sqrt(2) * sd)
    assert not ood["holds"] and not got["holds"]  # 50 vs 60: beyond two seeds' difference
    iid = got["metrics"]["iid_acc1"]
    p_ = np.mean([r[1] for r in rows]) / 100
    floor = 100 * math.sqrt(p_ * (1 - p_) / 1000)
    assert iid["binomial_se"] == pytest.approx(floor) and iid["holds"]


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
