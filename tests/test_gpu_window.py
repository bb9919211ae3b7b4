"""bench/gpu_window.py (issue 35; its code: nac/bench/window*.py): the plan and its deadline, the
arguments, the refusal without CUDA, the output folder, the converged part with stand-in tools,
and (slow) the whole window as a CPU dry run. No GPU number is checked: none is measured here."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

from nac.bench import window as gw
from nac.bench import window_measure as wm

ROOT = Path(__file__).resolve().parents[1]

SMALL = (gw.Part("a", 10, 50, ""), gw.Part("b", 40, 40, ""), gw.Part("c", 5, 20, ""), gw.Part("rest", 10, None, ""))


def test_plan_gives_each_part_its_share_in_order():
    rows = gw.plan(SMALL, budget_s=200, reserve_s=10)
    assert [r["allowed_s"] for r in rows] == [50, 40, 20, 80]  # the last takes what is left
    assert [r["start_s"] for r in rows] == [0, 50, 90, 110]
    assert all(r["skipped"] is None for r in rows)


def test_plan_skips_what_no_longer_fits_and_runs_what_still_does():
    rows = {r["part"]: r for r in gw.plan(SMALL, budget_s=80, reserve_s=10)}
    assert rows["a"]["allowed_s"] == 50
    assert rows["b"]["allowed_s"] is None and "needs at least 40 s, 20 s of the window left" in rows["b"]["skipped"]
    assert rows["c"]["allowed_s"] == 20  # smaller, after the skipped one
    assert rows["rest"]["skipped"] and "0 s of the window left" in rows["rest"]["skipped"]


def test_default_plan_fits_the_window():
    rows = gw.plan()
    allowed = [r["allowed_s"] or 0 for r in rows]
    assert sum(allowed) <= gw.BUDGET_S - gw.RESERVE_S
    for part, r in zip(gw.PARTS, rows):
        assert r["allowed_s"] is None or part.share_s is None or r["allowed_s"] <= part.share_s
    measuring = [r for r in rows if r["part"] in gw.MEASURING]
    assert all(r["skipped"] is None for r in measuring), "the 9-minute window must hold every measurement"


def test_decide_and_converged_minutes():
    assert gw.decide(gw.Part("x", 30, None, ""), 100) == (100, None)
    assert gw.decide(gw.Part("x", 30, 60, ""), 100) == (60, None)
    assert gw.decide(gw.Part("x", 30, 60, ""), 45) == (45, None)  # less than its share left: what is left
    assert gw.decide(gw.Part("x", 30, 60, ""), 29)[0] is None
    assert gw.converged_minutes(gw.CONVERGED_MARGIN_S + gw.STOP_S + 150) == 2
    assert gw.converged_minutes(gw.CONVERGED_MARGIN_S + gw.STOP_S + 59) == 0


def test_arguments(monkeypatch, tmp_path):
    monkeypatch.setenv("OUT", str(tmp_path))
    a = gw.parse([])
    assert a.out == str(tmp_path) and (a.batch, a.blocks, a.steps, a.eval_batch) == (128, 5, 10, [1024, 256])
    d = gw.parse(["--cpu-dry-run", "--out", "x"])
    assert d.out == "x" and (d.batch, d.blocks, d.steps, d.eval_batch) == (4, 2, 1, [4])
    monkeypatch.delenv("OUT")
    for argv, says in (
        ([], "give --out DIR (or set $OUT)"),
        (["--out", "x", "--batch", "0"], "--batch must be at least 1"),
        (["--out", "x", "--budget-s", "10"], "must exceed --reserve-s"),
        (["--out", "x", "--parts", "nope"], "invalid choice"),
    ):
        with pytest.raises(SystemExit) as e:
            gw.parse(argv)
        assert e.value.code == 2


def test_refuses_without_cuda_in_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        gw.main(["--out", str(tmp_path / "w")])
    msg = e.value.code
    assert isinstance(msg, str) and "\n" not in msg  # a string: printed to stderr, exit status 1
    assert "needs a CUDA device" in msg and "--cpu-dry-run" in msg and "python bench/gpu_window.py --out $OUT" in msg
    assert not (tmp_path / "w").exists()


def test_plan_flag_prints_without_a_device(capsys):
    assert gw.main(["--plan", "--budget-s", "200"]) == 0
    out = capsys.readouterr().out
    assert "step_eager" in out and "skipped: needs at least" in out


def test_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    with pytest.raises(SystemExit, match="is not empty"):
        gw.main(["--cpu-dry-run", "--out", str(tmp_path), "--parts", "converged"])


def _fake_tool(tmp_path: Path, budget: bool) -> Path:
    script = tmp_path / "fake_converged.py"
    option = 'ap.add_argument("--budget", type=int, required=True)' if budget else ""
    script.write_text(
        "import argparse, json, pathlib\n"
        "ap = argparse.ArgumentParser()\n"
        f"{option}\n"
        'ap.add_argument("--out")\n'
        "a = ap.parse_args()\n"
        "p = pathlib.Path(a.out)\n"
        "p.mkdir(parents=True, exist_ok=True)\n"
        '(p / "piece.json").write_text(json.dumps(vars(a)))\n'
        'print("piece done")\n'
    )
    return script


def _window(tmp_path, budget: bool, budget_s: float):
    out, keep = tmp_path / "out", tmp_path / "conv"
    tool = _fake_tool(tmp_path, budget)
    argv = ["--cpu-dry-run", "--out", str(out), "--parts", "converged", "--budget-s", str(budget_s)]
    argv += ["--converged-cmd", sys.executable, str(tool), f"--converged-args=--out {keep}"]
    argv += ["--converged-keep", str(keep)]
    assert gw.main(argv) == 0
    return out, json.loads((out / gw.JSON_NAME).read_text())


def test_converged_piece_runs_with_a_budget_and_comes_back_tarred(tmp_path):
    out, res = _window(tmp_path, budget=True, budget_s=200)
    rec = res["parts"]["converged"]
    assert rec["ran"] and rec["rc"] == 0 and not rec["stopped"]
    assert rec["budget_min"] == gw.converged_minutes(rec["allowed_s"]) >= 1
    with tarfile.open(out / gw.CONVERGED_NAME) as tar:
        names = tar.getnames()
        piece = json.loads(tar.extractfile("conv/piece.json").read())
        log = tar.extractfile("converged.log").read().decode()
    assert "converged.log" in names and piece["budget"] == rec["budget_min"] and "piece done" in log
    assert sorted(p.name for p in out.iterdir()) == sorted([gw.JSON_NAME, gw.LOG_NAME, wm.SMI_NAME, gw.CONVERGED_NAME])
    prov = res["provenance"]
    assert set(prov["code"]) == {"nac", "stages", "dvc.yaml"} and len(prov["bench_sha256"]) == 64
    assert res["start"] <= res["end"] and res["machine"]["cpu_dry_run"] is True


def test_converged_without_budget_option_is_recorded_and_not_run(tmp_path):
    out, res = _window(tmp_path, budget=False, budget_s=200)
    rec = res["parts"]["converged"]
    assert rec["ran"] is False and "names no --budget option" in rec["reason"]
    assert not (out / gw.CONVERGED_NAME).exists() and not (tmp_path / "conv").exists()


def test_converged_is_skipped_when_the_window_is_short(tmp_path):
    out, res = _window(tmp_path, budget=True, budget_s=100)
    rec = res["parts"]["converged"]
    assert rec["skipped"].startswith("skipped: needs at least 105 s")
    assert "converged: skipped" in (out / gw.LOG_NAME).read_text()


def test_a_part_past_its_time_is_stopped(tmp_path):
    with (tmp_path / "log").open("w") as log:
        status = gw.run_bounded([sys.executable, "-c", "import time; time.sleep(120)"], 0.5, log)
    assert status["stopped"] and status["rc"] != 0


def test_sync_counting_needs_its_probe_seen(monkeypatch):
    """The counting on the CPU: the debug mode's switch and synchronize stand in, the 'syncs' are
    the warnings torch's mode raises (its message), two per step here."""
    import warnings

    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", lambda mode: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def sync():
        warnings.warn("called a synchronizing CUDA operation")

    def step():
        sync(), sync()
        warnings.warn("something else")

    cuda = torch.device("cuda")
    res = wm.count_syncs(step, 3, cuda, probe=sync)
    assert res["syncs_per_step"] == 2 and sum(res["where"].values()) == 6
    unseen = wm.count_syncs(step, 3, cuda, probe=lambda: None)
    assert unseen["syncs_per_step"] is None and "saw 0 syncs in one known sync" in unseen["note"]
    assert wm.count_syncs(step, 3, torch.device("cpu"))["syncs_per_step"] is None


@pytest.mark.slow  # 2 s on a quiet 2-core machine, 10+ s under load: two models built and stepped
def test_the_step_part_measures_both_models_first_and_fits_its_blocks_to_what_is_left():
    """With its deadline passed after the first steps, the part still reports each model's first
    steps (what a window must not lose) and times no block."""
    saved = []
    res = wm.measure_step("eager", 2, 2, 1, time.time() - 1, True, lambda r: saved.append(json.loads(json.dumps(r))))
    out = res["sizes"]["tiny"]
    assert set(out["models"]) == {"perceiver_io", "nac"} and [set(r["sizes"]["tiny"]["models"]) for r in saved[:2]] == [
        {"perceiver_io"},
        {"perceiver_io", "nac"},
    ]
    for row in out["models"].values():
        assert row["first_step_s"] > 0 and len(row["first_steps_s"]) == 4 and row["syncs_per_step"] is None
        assert (row["graphs"], row["breaks"]) == (0, 0)  # eager: nothing compiled
    assert out["blocks"] == 0 and "no block fitted" in out["timing"] and "nac_over_pio" not in out


@pytest.mark.slow
def test_the_step_part_times_interleaved_blocks():
    res = wm.measure_step("eager", 2, 3, 1, time.time() + 300, True, lambda r: None)
    out = res["sizes"]["tiny"]
    assert out["blocks"] == 3 and out["nac_over_pio"]["n"] == 3 and len(out["s_per_step"]["nac"]["values"]) == 3
    ratios = [a / b for a, b in zip(out["s_per_step"]["nac"]["values"], out["s_per_step"]["perceiver_io"]["values"])]
    assert out["nac_over_pio"]["values"] == pytest.approx(ratios)
    assert out["images_per_s"]["nac"] == pytest.approx(2 / out["s_per_step"]["nac"]["mean"])


@pytest.mark.slow
def test_cpu_dry_run_of_the_whole_window(tmp_path):
    """Every default part, tiny, in processes of their own, as the GPU machine runs them (about 160 s
    on 2 shared cores). The graphed part runs the CPU stand-in of the captured step (``Replay``), the
    compiled part ``aot_eager`` with ``compile_scope: regional``: one graph per model (its propagators
    share it), no break; the CUDA graphs' equality test runs its CPU tests."""
    out = tmp_path / "w"
    p = subprocess.run(
        [sys.executable, "bench/gpu_window.py", "--cpu-dry-run", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    res = json.loads((out / gw.JSON_NAME).read_text())
    assert list(res["parts"]) == list(gw.DEFAULT_PARTS)
    assert res["parts"]["graphs_equal"]["rc"] == 0 and "passed" in res["parts"]["graphs_equal"]["summary"]
    for name, form in gw.STEP_FORMS.items():
        rec = res["parts"][name]
        assert rec["rc"] == 0 and not rec["stopped"], rec
        r = rec["results"]
        assert r["form"] == form
        out_tiny = r["sizes"]["tiny"]
        assert out_tiny["nac_over_pio"]["n"] == out_tiny["blocks"] == 2
        for row in out_tiny["models"].values():
            assert (row["graphs"], row["breaks"]) == ((1, 0) if form == "compiled" else (0, 0))
        assert out_tiny["recompiles_in_blocks"] == 0
    rounds = res["parts"]["mini_workers"]["rounds"]
    assert [(r["graphed"], r["workers"]) for r in rounds] == [(False, 1), (True, 2)]
    ran = [r for r in rounds if "skipped" not in r]  # a round that no longer fits the share says so
    assert ran and ran[0] is rounds[0] and all("share ran out" in r["skipped"] for r in rounds if r not in ran)
    assert all(len(r["steps_per_s_per_worker"]) == r["workers"] and r["steps_per_s_in_all"] > 0 for r in ran)
    assert len(list(out.iterdir())) <= gw.MAX_FILES
    assert "window done" in p.stdout
