"""nac.pipeline.pool: a stage's jobs spread over worker processes give the results of running
them one after another (the byte-identical check on real training jobs is in test_pipeline.py),
in job order, with the first failure raised in the stage and a bad setting rejected."""

import os

import pytest
import torch

from nac.pipeline import pool


def _square_and_threads(x: int, progress: bool = True) -> tuple[int, int, int, bool, dict]:
    from nac.progress import bar_kwargs

    return x * x, torch.get_num_threads(), os.getpid(), progress, bar_kwargs()


def _fail_on(x: int, progress: bool = True) -> int:
    if x == 2:
        raise SystemExit(f"job {x} stopped: the checkpoint of epoch 1 is intact; rerun to resume")
    return x


@pytest.mark.parametrize("workers", ["1", "2"])
def test_results_come_back_in_job_order_with_one_thread_per_job(monkeypatch, workers):
    monkeypatch.setenv(pool.WORKERS_ENV, workers)
    monkeypatch.delenv(pool.THREADS_ENV, raising=False)
    out = pool.run_jobs(_square_and_threads, [(x,) for x in range(5)], device="cpu")
    assert [o[0] for o in out] == [0, 1, 4, 9, 16]
    assert {o[1] for o in out} == {1}  # the same thread count whatever the number of workers
    pids = {o[2] for o in out}
    assert all(o[3] for o in out)  # bars on, wherever the job runs
    if workers == "1":
        assert pids == {os.getpid()} and all(o[4] == {} for o in out)  # in this process: where tqdm puts them
    else:  # in workers: each worker's bars on its own line under the job counter, cleared after each job
        assert os.getpid() not in pids
        line = {o[2]: o[4]["position"] for o in out}
        assert sorted(set(line.values())) == sorted(range(1, len(pids) + 1)), line
        assert all(o[4] == {"position": line[o[2]], "leave": False} for o in out)


@pytest.mark.slow  # in CI's slow run: the default run (5 min) went past 5 min on a slower VM (2026-11-27)
def test_each_finished_job_says_its_outcome(monkeypatch, capsys):
    """A line per finished job: ``done`` by default, or what ``outcome`` makes of its result (the
    converged runner's pieces that the budget did not let start say so, not "done")."""
    monkeypatch.setenv(pool.WORKERS_ENV, "2")
    monkeypatch.delenv(pool.THREADS_ENV, raising=False)
    jobs = [(x,) for x in range(3)]
    pool.run_jobs(_square_and_threads, jobs, device="cpu", desc="t", outcome=lambda r: f"gave {r[0]}")
    err = capsys.readouterr().err
    assert all(f"t: {x} gave {x * x} (" in err for x in range(3)) and " done (" not in err, err
    pool.run_jobs(_square_and_threads, jobs, device="cpu", desc="t")
    err = capsys.readouterr().err
    assert all(f"t: {x} done (" in err for x in range(3)), err


def test_a_failing_job_stops_the_stage_with_its_message(monkeypatch):
    monkeypatch.setenv(pool.WORKERS_ENV, "2")
    with pytest.raises(SystemExit, match="job 2 stopped: the checkpoint of epoch 1 is intact"):
        pool.run_jobs(_fail_on, [(x,) for x in range(6)], device="cpu")


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_worker_count_is_rejected_before_any_job(monkeypatch, value):
    monkeypatch.setenv(pool.WORKERS_ENV, value)
    with pytest.raises(ValueError, match=f"{pool.WORKERS_ENV}=.*not a positive integer"):
        pool.run_jobs(_fail_on, [(2,)], device="cpu")


def test_defaults(monkeypatch):
    for name in (pool.WORKERS_ENV, pool.THREADS_ENV, "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert pool.threads_for("cpu") == 1 and pool.threads_for("cuda") is None
    assert pool.workers_for("cuda", 10) == 1  # one GPU: the jobs take turns
    assert 1 <= pool.workers_for("cpu", 10) <= max(1, len(os.sched_getaffinity(0)))
    assert pool.workers_for("cpu", 1) == 1  # never more workers than jobs
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert pool.workers_for("cpu", 10) == 1  # under torchrun each job is itself parallel


def test_run_and_seed_go_together():
    import argparse

    from nac.pipeline.pool import add_job_arguments, one_job

    ap = argparse.ArgumentParser()
    add_job_arguments(ap, "one run")
    assert one_job(ap, ap.parse_args(["--run", "nac", "--seed", "0"]), "all") is True
    assert one_job(ap, ap.parse_args([]), "all") is False
    for half in (["--run", "nac"], ["--seed", "1"]):
        with pytest.raises(SystemExit):
            one_job(ap, ap.parse_args(half), "every run")


def _always_fail(x: int, progress: bool = True) -> int:
    raise SystemExit(f"job {x} stopped")


@pytest.mark.timeout(300)
def test_jobs_failing_together_end_the_stage_without_hanging(monkeypatch):
    """Every worker failing at once: the stage stops the rest (SIGTERM, then SIGKILL for one that
    cannot end, e.g. blocked on a queue lock a stopped worker held) and raises, never hangs."""
    monkeypatch.setenv(pool.WORKERS_ENV, "2")
    monkeypatch.setattr(pool, "STOP_GRACE_S", 5.0)
    with pytest.raises(SystemExit, match=r"job \d stopped"):
        pool.run_jobs(_always_fail, [(x,) for x in range(4)], device="cpu")
