"""A stage's independent jobs (one trained model, or one few-shot target, each) run side by side
in worker processes.

Why: one process that trains several models (instead of one DVC stage, one Python start-up and
one round of DVC bookkeeping per model) and, on a CPU, two one-thread jobs side by side rather
than one two-thread job after another: a second intra-op thread speeds one job up by far less
than 2x, so two one-thread jobs side by side finish sooner than the same two jobs one after the
other on two threads (``bench/bench_pool.py`` measures both with the mini NAC; the numbers are
in ``bench/results/pool.json``), and the per-stage overhead this removes was the larger part of
the old stages' cost.

Results do not depend on how many workers run: every job runs with the same number of intra-op
threads (``NAC_THREADS``; default 1 on a CPU, torch's own on a GPU) and seeds itself, whether it
runs in this process or in a worker that ran another job before; ``tests/test_pool.py`` checks a
stage's metrics byte-identical with one worker and with two. The number of workers is therefore
not a DVC parameter: ``NAC_WORKERS`` (default: the CPU cores this process may use; on a GPU one
per visible GPU times ``NAC_JOBS_PER_GPU``; 1 under ``torchrun``, where the job itself is parallel).

Placement (``nac.pipeline.placement``): each worker is pinned to one device of ``NAC_DEVICES``
(default every visible GPU). Engine (``NAC_EXECUTOR``): ``pool`` (default) runs the workers here;
``local`` and ``slurm`` submit every job through submitit (``nac.pipeline.slurm``), on this
machine or on a SLURM cluster, and wait for them: the same outputs either way. Signals and the
death of the launching ``dvc`` stop the workers (``nac.pipeline.lifeline``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from nac.pipeline import lifeline, placement
from nac.pipeline.envvars import choice, positive_int
from nac.progress import set_worker_line

WORKERS_ENV, THREADS_ENV, EXECUTOR_ENV = "NAC_WORKERS", "NAC_THREADS", "NAC_EXECUTOR"
EXECUTORS = ("pool", "local", "slurm")


def _positive_env(name: str) -> int | None:
    return positive_int(name)


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


def slots_for(device: str) -> list[placement.Slot]:
    """The devices workers are pinned to (none under torchrun or on an unpinned CPU)."""
    if _distributed():
        return []
    return placement.devices(_on_gpu(device))


def workers_for(device: str, n_jobs: int) -> int:
    """Worker processes for ``n_jobs`` jobs on ``device`` (the params' ``device``)."""
    asked, per_device = _positive_env(WORKERS_ENV), placement.jobs_per_device()  # both read: a bad one fails
    if asked is None:
        if _distributed():
            asked = 1
        elif slots := slots_for(device):
            asked = len(slots) * per_device
        else:
            asked = 1 if _on_gpu(device) else usable_cores()
    return max(1, min(asked, n_jobs))


def threads_for(device: str) -> int | None:
    """Intra-op threads of every job (None: leave torch's default)."""
    asked = _positive_env(THREADS_ENV)
    if asked is not None:
        return asked
    return None if _on_gpu(device) else 1


_STARTED: list = [None]  # in a worker: the queue it reports (job index, pid) on when a job starts


def _run_one(fn: Callable, args: tuple, threads: int | None, progress: bool, index: int | None = None) -> Any:
    """Job ``index`` in a worker: say that it starts (``_STARTED``), then ``lifeline.run_job``."""
    if lifeline.STOPPING[0]:  # told to stop (the stage is ending): start no new job
        os._exit(128 + signal.SIGTERM)
    if index is not None and _STARTED[0] is not None:
        _STARTED[0].put((index, os.getpid()))
    return lifeline.run_job(fn, args, threads, progress)


def _init_worker(slots, lines, bar_lock, parent_pid: int, started=None) -> None:
    """A worker's start: take the next device (a queue of the workers' slots) and bar line (a queue
    of 1..n), watch the stage; ``started``: where it says which job it starts."""
    _STARTED[0] = started
    lifeline.worker_process(parent_pid)
    placement.pin(slots.get())
    set_worker_line(lines.get(), bar_lock)


def _run_here(fn: Callable, jobs: list, threads: int | None, slot: placement.Slot | None, bar) -> list[Any]:
    """The jobs one after another in this process (pinned to ``slot``; a CPU pin is undone after)."""
    affinity = os.sched_getaffinity(0) if slot is not None and slot.kind == "cpu" else None
    placement.pin(slot)
    try:
        results = []
        for job in jobs:
            results.append(_run_one(fn, job, threads, True))
            bar.update()
        return results
    finally:
        if affinity is not None:
            os.sched_setaffinity(0, affinity)


class WorkerKilled(SystemExit):
    """A worker process died outside Python (killed by a signal, or a crash in native code)."""


def _likely_cause(signum: int) -> str:
    if signum == signal.SIGKILL:
        return (
            "most likely the out-of-memory killer (check `dmesg | grep -i -e oom -e killed`); "
            "rerun with fewer workers (NAC_WORKERS=1) or on a machine with more memory"
        )
    if signum in (signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGILL):
        return "a crash in native code (torch, a driver); rerun, and report it with the job's name if it recurs"
    return "sent by another process or the system; rerun when it is done"


def killed_message(desc: str, exitcode: int | None, job: str | None, pid: int) -> str:
    """The one line for a worker that died: which job, which signal, the likely cause, what to do."""
    what = f"job {job}" if job is not None else "a worker between jobs"
    if exitcode is not None and exitcode < 0:
        sig = signal.Signals(-exitcode).name
        how, cause = f"was killed by {sig}", _likely_cause(-exitcode)
    else:
        how, cause = f"exited abruptly (exit code {exitcode})", "a crash outside Python; rerun"
    return (
        f"{desc}: {what} (worker pid {pid}) {how}: {cause}. The other jobs were stopped; every finished "
        "job's results and every checkpoint written are kept, so a rerun resumes"
    )


STOP_GRACE_S = 30.0  # a stopped job's time to report back (its one line; its checkpoint is intact)


def _stop(procs: list, pending: set) -> None:
    """Stop a stage's workers: queued jobs are cancelled, running ones get SIGTERM (each ends with
    its one line, the checkpoint of its last epoch intact) and up to ``STOP_GRACE_S`` to report
    back; then every worker is killed (a pool worker would otherwise wait for the next job, and
    one can block on a queue lock a stopped worker held), so the stage never hangs on them."""
    running = {f for f in pending if not f.cancel()}
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        if p.is_alive():
            p.terminate()
    wait(running, timeout=STOP_GRACE_S)
    for p in procs:  # a worker told to stop starts no new job (lifeline.STOPPING): it exits
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
        p.join()


def run_jobs(
    fn: Callable,
    jobs: Sequence[tuple],
    *,
    device: str = "auto",
    desc: str = "jobs",
    label: Callable[[tuple], str] = lambda job: "-".join(map(str, job)),
    outcome: Callable[[Any], str] = lambda result: "done",
    workdir: str | os.PathLike | None = None,
) -> list[Any]:
    """``[fn(*job, progress=...) for job in jobs]``, with the jobs spread over ``workers_for(device)``
    processes, in the given order (put the longest first). ``fn`` must be importable (a module
    function taking a keyword ``progress``, true when its own bars may show). A bar counts finished
    jobs; in workers each job's own bars go on its worker's line (``nac.progress``), and a line per
    finished job says ``<label> <outcome(result)> (<seconds> s)`` (default: done; with one worker
    the jobs run in this process, their own output in view, and no such line is written). The first job
    that fails stops the rest: jobs not started are cancelled, running ones are stopped (their last
    per-epoch checkpoint stays, so a rerun resumes), and its error is raised here. ``workdir``: the
    folder submitit's logs and pickles go under (``NAC_EXECUTOR`` ``local`` / ``slurm``;
    ``nac.pipeline.slurm``), the working directory unless given."""
    from tqdm.auto import tqdm

    jobs = list(jobs)
    executor = choice(EXECUTOR_ENV, EXECUTORS, "pool")
    threads, n = threads_for(device), workers_for(device, len(jobs))
    slots = placement.assign(slots_for(device), n)
    if executor != "pool":
        from nac.pipeline import slurm

        return slurm.run_jobs(
            fn,
            jobs,
            executor=executor,
            threads=threads,
            slots=slots,
            desc=desc,
            label=label,
            outcome=outcome,
            workdir=workdir,
        )
    where = f" on {', '.join(sorted({s.name for s in slots}))}" if slots[0] is not None else ""
    bar = tqdm(
        total=len(jobs), desc=f"{desc} ({n} worker{'s' if n > 1 else ''}{where})", unit="job", dynamic_ncols=True
    )
    results: list[Any] = [None] * len(jobs)
    if n == 1:
        try:
            return _run_here(fn, jobs, threads, slots[0], bar)
        finally:
            bar.close()
    start = time.perf_counter()
    ctx = mp.get_context("spawn")
    queue, lines = ctx.Queue(), ctx.Queue()
    for k, slot in enumerate(slots, start=1):
        queue.put(slot)
        lines.put(k)
    bar_lock = ctx.RLock()
    tqdm.set_lock(bar_lock)  # this process's bar and the workers' share the terminal
    # which worker runs which job: a SimpleQueue, whose put writes to the pipe before it returns (a
    # Queue's feeder thread may not have written when the worker is SIGKILLed just after: the job
    # was then unnamed), drained after every finished job so that the pipe never fills
    started, running = ctx.SimpleQueue(), {}
    ex = ProcessPoolExecutor(
        max_workers=n,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(queue, lines, bar_lock, os.getpid(), started),
    )
    futures: dict = {}
    pending: set = set()
    procs: dict = {}
    try:
        futures = {ex.submit(_run_one, fn, job, threads, True, i): i for i, job in enumerate(jobs)}
        procs = dict(getattr(ex, "_processes", None) or {})  # kept: a broken pool forgets its workers
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            _drain(started, running)
            for f in done:
                i = futures[f]
                try:
                    results[i] = f.result()  # re-raises the job's error (the finally stops the rest)
                except BrokenProcessPool:
                    pending |= {g for g in futures if not g.done()}
                    raise _killed(desc, procs, started, running, jobs, label) from None
                bar.update()
                tqdm.write(
                    f"{desc}: {label(jobs[i])} {outcome(results[i])} ({time.perf_counter() - start:.0f} s)",
                    file=sys.stderr,
                )
    finally:
        bar.close()
        broken = bool(getattr(ex, "_broken", False))  # a worker died: its survivors must not go on
        if pending or broken:  # a job failed (or this process was interrupted) with others still queued or running
            _stop(list(procs.values()) or list((getattr(ex, "_processes", None) or {}).values()), pending)
        ex.shutdown(wait=True, cancel_futures=True)
    return results


def _drain(started, running: dict[int, int]) -> None:
    """Read every (job index, worker pid) the workers reported so far into ``running`` (pid -> job)."""
    while not started.empty():
        i, pid = started.get()
        running[pid] = i


def _killed(desc: str, procs: dict, started, running: dict[int, int], jobs: list, label: Callable) -> WorkerKilled:
    """The error for a pool broken by a worker's death: the dead worker (a signal other than the
    SIGTERM the pool sends its survivors), the job it was running (the last one it reported)."""
    _drain(started, running)
    survivor_codes = (0, -signal.SIGTERM, 128 + signal.SIGTERM)
    # a dead worker's pipe (the pool's sentinel) closes a moment before the kernel reports its exit
    # status, so the pool can break while waitpid still says "running": wait for the statuses (the
    # pool terminates and joins the survivors), bounded
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and not any(
        p.exitcode is not None and p.exitcode not in survivor_codes for p in procs.values()
    ):
        if all(p.exitcode is not None for p in procs.values()):
            break
        time.sleep(0.02)
    dead = [p for p in procs.values() if p.exitcode is not None and p.exitcode not in survivor_codes]
    if not dead:
        dead = [p for p in procs.values() if p.exitcode is not None] or list(procs.values())[:1]
    if not dead:
        return WorkerKilled(f"{desc}: a worker process died; rerun (the finished jobs' results are kept)")
    p = dead[0]
    job = label(jobs[running[p.pid]]) if p.pid in running else None
    return WorkerKilled(killed_message(desc, p.exitcode, job, p.pid))
