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

Why its own workers (``serve``, ``_Workers``: spawned processes, one pipe each) rather than
``concurrent.futures.ProcessPoolExecutor``: the stage must name the job a dead worker ran (the
executor breaks the whole pool on a death and says which job of none; the earlier version needed a
side queue and module lists for it) and hand a job to a chosen worker, whose own loop runs it
(issue 48: the route from the stage to ``optimizer.step()`` in five calls, ``docs/design.md``).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait as wait_ready
from typing import Any

from tqdm.auto import tqdm

from nac.pipeline import lifeline, placement
from nac.pipeline.envvars import choice, positive_int
from nac.pipeline.worker import Worker, set_threads

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
    import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

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


def serve(conn, slot: placement.Slot | None, line: int, bar_lock, parent_pid: int) -> None:
    """A worker process's life: its ``Worker`` (bars on ``line``), the stage watched
    (``lifeline.worker_process``), pinned to ``slot``; then the jobs the stage sends on ``conn``,
    ``(index, fn, args, threads)``, one at a time: ``fn(*args, progress=True)``, answered
    ``(index, True, result)`` or ``(index, False, (error, its traceback))``, until ``None``. A
    stop signal between jobs (or one that lands outside the job's own handling) ends the process."""
    worker = Worker.start(line)
    lifeline.worker_process(parent_pid, worker.on_signal)
    placement.pin(slot)
    tqdm.set_lock(bar_lock)  # the stage's bar and its workers' share the terminal
    try:
        while (task := conn.recv()) is not None:
            index, fn, args, threads = task
            with worker.job(threads):
                try:
                    answer = (index, True, fn(*args, progress=True))
                except BaseException as e:  # noqa: BLE001 (the stage raises it; a stop's one line included)
                    answer = (index, False, (e, traceback.format_exc()))
            _answer(conn, answer)
    except (KeyboardInterrupt, EOFError):  # told to stop, or the stage is gone: nothing left to say
        os._exit(128 + signal.SIGTERM)


def _answer(conn, answer: tuple) -> None:
    try:
        conn.send(answer)
    except Exception as e:  # noqa: BLE001 (a result or error that cannot be pickled: its text)
        index, ok, value = answer
        tb = value[1] if not ok else ""
        error = RuntimeError(f"job {index}'s {'result' if ok else 'error'} cannot be sent back: {e}")
        conn.send((index, False, (error, tb)))


class RemoteTraceback(Exception):
    """A job's traceback in its worker, attached to its error raised in the stage."""

    def __str__(self) -> str:
        return self.args[0]


def _raised(value: tuple) -> BaseException:
    error, tb = value
    if tb:
        error.__cause__ = RemoteTraceback(f'\n"""\n{tb}"""')
    return error


class _Workers:
    """The stage's worker processes (``serve``), one pipe each: which job each runs is known here."""

    def __init__(self, slots: list, bar_lock, desc: str):
        ctx = mp.get_context("spawn")
        self.procs, self.conns = [], []
        self.running: dict[int, int] = {}  # worker -> the index of the job it runs
        for k, slot in enumerate(slots, start=1):
            here, there = ctx.Pipe()
            p = ctx.Process(target=serve, args=(there, slot, k, bar_lock, os.getpid()), name=f"{desc}-worker-{k}")
            self.procs.append(p)
            self.conns.append(here)
            p.start()
            there.close()  # the worker's end: its death closes the pipe (EOF here)

    def give(self, w: int, index: int, task: tuple) -> None:
        """Job ``index`` to worker ``w`` (``task``: what ``serve`` reads)."""
        self.conns[w].send(task)
        self.running[w] = index

    def ready(self) -> tuple[list[int], list[int]]:
        """Wait until a running worker answers or any worker dies: ``(workers with an answer, dead workers)``."""
        alive = [p.sentinel for p in self.procs]
        ready = set(wait_ready([self.conns[w] for w in self.running] + alive))
        answered = [w for w in self.running if self.conns[w] in ready or self.conns[w].poll()]
        dead = [w for w, p in enumerate(self.procs) if p.sentinel in ready and w not in answered]
        return answered, dead

    def close(self) -> None:
        """Every worker told to end after its job (all done), then joined."""
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        self._join(time.monotonic() + STOP_GRACE_S)

    def stop(self) -> None:
        """Stop the workers: running jobs get SIGTERM (each ends with its one line, the checkpoint of
        its last epoch intact) and up to ``STOP_GRACE_S`` to report back, idle workers exit; their
        answers are read meanwhile (a worker blocked writing one would not end); then every worker
        still there is killed, so the stage never hangs on them."""
        deadline = time.monotonic() + STOP_GRACE_S
        for p in self.procs:
            if p.is_alive():
                p.terminate()
        while time.monotonic() < deadline and any(p.is_alive() for p in self.procs):
            open_conns = [c for c in self.conns if not c.closed]
            ready = wait_ready(
                open_conns + [p.sentinel for p in self.procs if p.is_alive()],
                timeout=max(0.0, deadline - time.monotonic()),
            )
            for c in open_conns:
                if c in ready:
                    try:
                        c.recv()
                    except (EOFError, OSError):
                        c.close()
        self._join(deadline)

    def _join(self, deadline: float) -> None:
        for p, conn in zip(self.procs, self.conns):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
            p.join()
            conn.close()


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
    that fails stops the rest: jobs not started are not, running ones are stopped (their last
    per-epoch checkpoint stays, so a rerun resumes), and its error is raised here; a worker that
    dies names its job (``WorkerKilled``). ``workdir``: the folder submitit's logs and pickles go
    under (``NAC_EXECUTOR`` ``local`` / ``slurm``; ``nac.pipeline.slurm``), the working directory
    unless given.

    Each job is one call of ``fn``: here (one worker) or in a worker's ``serve`` loop, which
    the job's index, ``fn`` and arguments reach by the worker's pipe."""
    jobs = list(jobs)
    executor = choice(EXECUTOR_ENV, EXECUTORS, "pool")
    threads, n = threads_for(device), workers_for(device, len(jobs))
    slots = placement.assign(slots_for(device), n)
    if executor != "pool":
        from nac.pipeline import slurm  # deferred: submitit, only for NAC_EXECUTOR=local|slurm

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
    if n == 1:  # in this process, pinned to its slot (a CPU pin undone after)
        affinity = os.sched_getaffinity(0) if slots[0] is not None and slots[0].kind == "cpu" else None
        placement.pin(slots[0])
        try:
            for i, job in enumerate(jobs):
                set_threads(threads)
                results[i] = fn(*job, progress=True)
                bar.update()
            return results
        finally:
            bar.close()
            if affinity is not None:
                os.sched_setaffinity(0, affinity)
    start = time.perf_counter()
    lock = mp.get_context("spawn").RLock()
    tqdm.set_lock(lock)  # this process's bar and the workers' share the terminal
    todo = list(range(len(jobs)))[::-1]  # pop(): the next job
    workers, ended = _Workers(slots, lock, desc), False
    try:
        for w in range(n):
            i = todo.pop()
            workers.give(w, i, (i, fn, jobs[i], threads))
        while workers.running:
            answered, dead = workers.ready()
            for w in answered:
                try:
                    i, ok, value = workers.conns[w].recv()
                except EOFError:  # died before answering
                    dead.append(w)
                    continue
                del workers.running[w]
                if not ok:
                    raise _raised(value)  # the job's error (the finally stops the rest)
                results[i] = value
                bar.update()
                tqdm.write(
                    f"{desc}: {label(jobs[i])} {outcome(value)} ({time.perf_counter() - start:.0f} s)", file=sys.stderr
                )
                if todo:
                    i = todo.pop()
                    workers.give(w, i, (i, fn, jobs[i], threads))
            if dead:
                w = dead[0]
                job = label(jobs[workers.running[w]]) if w in workers.running else None
                raise _killed(desc, workers.procs[w], job)
        ended = True
    finally:
        bar.close()
        workers.close() if ended else workers.stop()
    return results


def _killed(desc: str, proc, job: str | None) -> WorkerKilled:
    """The error for worker ``proc``'s death while running ``job`` (None: between jobs). Its pipe
    closes a moment before the kernel reports its exit status: the status is awaited, bounded."""
    deadline = time.monotonic() + STOP_GRACE_S
    while proc.exitcode is None and time.monotonic() < deadline:
        proc.join(0.02)
    return WorkerKilled(killed_message(desc, proc.exitcode, job, proc.pid))
