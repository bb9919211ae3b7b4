"""A stage's independent jobs (one trained model, or one few-shot target, each) run side by side
in worker processes.

Why: one process that trains several models (instead of one DVC stage, one Python start-up and
one round of DVC bookkeeping per model) and, on a CPU, two one-thread jobs side by side rather
than one two-thread job after another. Measured on the 2-core VM with the mini NAC
(``bench/bench_pool.py``, ``bench/results/pool.json``): a second intra-op thread speeds one job up
by about 1.42x, two one-thread jobs side by side finish about 1.2x sooner than the same two jobs
one after the other on two threads, and the per-stage overhead this removes was the larger part
of the old stages' cost.

Results do not depend on how many workers run: every job runs with the same number of intra-op
threads (``NAC_THREADS``; default 1 on a CPU, torch's own on a GPU) and seeds itself, whether it
runs in this process or in a worker that ran another job before; ``tests/test_pool.py`` checks a
stage's metrics byte-identical with one worker and with two. The number of workers is therefore
not a DVC parameter: ``NAC_WORKERS`` (default: the CPU cores this process may use; 1 on a GPU and
under ``torchrun``, where the job itself is parallel).
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

WORKERS_ENV, THREADS_ENV = "NAC_WORKERS", "NAC_THREADS"


def _positive_env(name: str) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{name}={raw!r} is not a positive integer; set it to e.g. 1 or 2, or unset it for the default")
    return int(raw)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def add_job_arguments(ap: argparse.ArgumentParser, run_help: str) -> None:
    """``--run R --seed S``: a stage's one job, trained in the calling process (e.g. under torchrun)."""
    ap.add_argument("--run", help=run_help)
    ap.add_argument("--seed", type=int, help="with --run: its seed")


def one_job(ap: argparse.ArgumentParser, args: argparse.Namespace, every: str) -> bool:
    """Whether ``args`` name one job (``--run`` and ``--seed``); exits with a usage error when only
    one of them is given. ``every``: what the stage runs without them."""
    if (args.run is None) != (args.seed is None):
        ap.error(f"--run and --seed go together (give both for one job, neither for {every})")
    return args.run is not None


def _distributed() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def _on_gpu(device: str) -> bool:
    if device.startswith("cuda"):
        return True
    if device != "auto":
        return False
    import torch
    return torch.cuda.is_available()


def workers_for(device: str, n_jobs: int) -> int:
    """Worker processes for ``n_jobs`` jobs on ``device`` (the params' ``device``)."""
    asked = _positive_env(WORKERS_ENV)
    if asked is None:
        asked = 1 if (_distributed() or _on_gpu(device)) else usable_cores()
    return max(1, min(asked, n_jobs))


def threads_for(device: str) -> int | None:
    """Intra-op threads of every job (None: leave torch's default)."""
    asked = _positive_env(THREADS_ENV)
    if asked is not None:
        return asked
    return None if _on_gpu(device) else 1


def _run_one(fn: Callable, args: tuple, threads: int | None, progress: bool) -> Any:
    if threads is not None:
        import torch
        torch.set_num_threads(threads)
    return fn(*args, progress=progress)


def run_jobs(fn: Callable, jobs: Sequence[tuple], *, device: str = "auto", desc: str = "jobs",
             label: Callable[[tuple], str] = lambda job: "-".join(map(str, job))) -> list[Any]:
    """``[fn(*job, progress=...) for job in jobs]``, with the jobs spread over ``workers_for(device)``
    processes, in the given order (put the longest first). ``fn`` must be importable (a module
    function taking a keyword ``progress``, true when its own bars may show). A bar counts finished jobs; each job's own bars are off in workers (two would
    overwrite each other). The first job that fails stops the rest: jobs not started are
    cancelled, running ones are stopped (their last per-epoch checkpoint stays, so a rerun
    resumes), and its error is raised here."""
    from tqdm.auto import tqdm

    jobs = list(jobs)
    threads, n = threads_for(device), workers_for(device, len(jobs))
    bar = tqdm(total=len(jobs), desc=f"{desc} ({n} worker{'s' if n > 1 else ''})", unit="job", dynamic_ncols=True)
    results: list[Any] = [None] * len(jobs)
    if n == 1:
        for i, job in enumerate(jobs):
            results[i] = _run_one(fn, job, threads, True)
            bar.update()
        bar.close()
        return results
    start = time.perf_counter()
    ex = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
    futures: dict = {}
    pending: set = set()
    try:
        futures = {ex.submit(_run_one, fn, job, threads, False): i for i, job in enumerate(jobs)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in done:
                i = futures[f]
                results[i] = f.result()  # re-raises the job's error (the finally stops the rest)
                bar.update()
                tqdm.write(f"{desc}: {label(jobs[i])} done ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    finally:
        bar.close()
        if pending:  # a job failed (or this process was interrupted) with others still queued or running
            for p in list(getattr(ex, "_processes", {}).values()):  # running jobs: stop, not wait
                p.terminate()
        ex.shutdown(wait=True, cancel_futures=True)
    return results
