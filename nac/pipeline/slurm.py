"""A stage's jobs through submitit: on a SLURM cluster (``NAC_EXECUTOR=slurm``) or on this
machine (``NAC_EXECUTOR=local``, submitit's local executor; what the tests run).

The stage submits one submitit job per training job (run x seed, or few-shot target), keeps at
most ``workers`` of them in flight, waits for every one and returns their results in job order.
Each job writes its outputs itself, to the same paths as in a local run (the repository must be
on a file system the nodes share), so after the stage ``dvc.lock`` and ``dvc status`` are as for
a local run. Preemption or timeout on SLURM: submitit calls ``Job.checkpoint``, which requeues
the same job; it resumes from its own per-epoch checkpoint (``models/...pt``). A job that dies
without a result (killed, node failure) is resubmitted up to ``NAC_RETRIES`` times (default 2)
and resumes the same way; a job that raises fails the stage with its last line.

Settings (environment variables; none changes a result): ``NAC_SUBMITIT_DIR`` (logs and
pickles, default ``.submitit/``; a relative one under the caller's ``workdir``, else the working
directory), ``NAC_SLURM_PARTITION``, ``NAC_SLURM_ACCOUNT``,
``NAC_SLURM_QOS``, ``NAC_SLURM_TIME`` (minutes per job, default 240), ``NAC_SLURM_GPUS``
(GPUs per job, default 1; 0: CPU-only jobs, each on ``NAC_THREADS`` threads, default 1),
``NAC_SLURM_CPUS`` (CPU cores per job, default 8),
``NAC_SLURM_MEM_GB`` (default 32). ``NAC_WORKERS`` caps the jobs in flight (default: every job on
SLURM; as for the pool on this machine).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import submitit
from submitit.core.utils import FailedJobError, UncompletedJobError
from tqdm.auto import tqdm

from nac.pipeline import lifeline, placement
from nac.pipeline.envvars import positive_int, raw
from nac.pipeline.worker import set_threads

POLL_S = 0.5


class Job:
    """One training job as submitit runs it: ``fn(*args, progress=False)`` with ``threads``
    intra-op threads, pinned to ``slot`` (local executor). ``watch_pid``: the stage's process,
    whose death stops the job (local executor; on SLURM ``scancel`` does)."""

    def __init__(
        self, fn: Callable, args: tuple, threads: int | None, slot: placement.Slot | None, watch_pid: int | None
    ):
        self.fn, self.args, self.threads, self.slot, self.watch_pid = fn, args, threads, slot, watch_pid

    def __call__(self) -> Any:
        # submitit's own handlers stay (SIGTERM bypassed, USR2 requeues through ``checkpoint``); the
        # stage's death interrupts with SIGINT, what cancelling a local job sends
        if self.watch_pid is not None:
            ident = lifeline._identity(self.watch_pid)
            if ident is None:
                raise SystemExit(f"the stage (pid {self.watch_pid}) that submitted this job is gone")
            lifeline.watch([ident], sig=signal.SIGINT)
        placement.pin(self.slot)
        set_threads(self.threads)
        return self.fn(*self.args, progress=False)

    def checkpoint(self, *args, **kwargs):
        """Preempted or timed out: requeue this same job; it resumes from its own checkpoint."""
        return submitit.helpers.DelayedSubmission(self)


def _folder(workdir: str | Path | None = None) -> Path:
    """``NAC_SUBMITIT_DIR`` (default ``.submitit``), a relative one under ``workdir`` when given."""
    return Path(workdir or "") / (raw("NAC_SUBMITIT_DIR") or ".submitit")


def _gpus() -> int:
    gpus = positive_int("NAC_SLURM_GPUS", "1 (0: CPU-only jobs)", minimum=0)
    return 1 if gpus is None else gpus


def make_executor(kind: str, desc: str, workdir: str | Path | None = None):
    """A submitit executor: ``local`` (this machine) or ``slurm`` with the ``NAC_SLURM_*`` settings;
    its logs and pickles under ``_folder(workdir)``."""
    folder = _folder(workdir) / desc / "%j"
    if kind == "local":
        ex = submitit.LocalExecutor(folder=folder)
        ex.update_parameters(timeout_min=positive_int("NAC_SLURM_TIME", "240") or 24 * 60, gpus_per_node=0)
        return ex
    ex = submitit.AutoExecutor(folder=folder, cluster="slurm")
    params: dict[str, Any] = dict(
        name=f"nac-{desc}",
        timeout_min=positive_int("NAC_SLURM_TIME", "240 (minutes)") or 240,
        nodes=1,
        tasks_per_node=1,
        gpus_per_node=_gpus(),
        cpus_per_task=positive_int("NAC_SLURM_CPUS", "8") or 8,
        mem_gb=positive_int("NAC_SLURM_MEM_GB", "32") or 32,
    )
    for env, key in (
        ("NAC_SLURM_PARTITION", "slurm_partition"),
        ("NAC_SLURM_ACCOUNT", "slurm_account"),
        ("NAC_SLURM_QOS", "slurm_qos"),
    ):
        if raw(env) is not None:
            params[key] = raw(env)
    ex.update_parameters(**params)
    return ex


def _last_line(err: BaseException) -> str:
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return lines[-1] if lines else repr(err)


def run_jobs(
    fn: Callable,
    jobs: list[tuple],
    *,
    executor: str,
    threads: int | None,
    slots: list[placement.Slot | None],
    desc: str,
    label: Callable[[tuple], str],
    outcome: Callable[[Any], str] = lambda result: "done",
    workdir: str | Path | None = None,
) -> list[Any]:
    """``[fn(*job, progress=False) for job in jobs]`` as submitit jobs, at most ``len(slots)``
    (local) or ``NAC_WORKERS`` (SLURM; default all) in flight; results in job order. ``workdir``:
    where a relative ``NAC_SUBMITIT_DIR`` is (``_folder``)."""
    ex = make_executor(executor, desc, workdir)
    retries = positive_int("NAC_RETRIES", "2", minimum=0)
    retries = 2 if retries is None else retries
    if executor == "slurm":  # SLURM places each job on its node's GPUs; threads as the node's device wants
        width = positive_int("NAC_WORKERS") or len(jobs)
        slots = [None] * max(1, min(width, len(jobs)))
        threads = positive_int("NAC_THREADS") or (None if _gpus() else 1)
    watch_pid = os.getpid() if executor == "local" else None
    results: list[Any] = [None] * len(jobs)
    free = list(range(len(slots)))  # indices of free slots
    queue = list(range(len(jobs)))
    running: dict = {}  # submitit job -> (job index, slot index, tries)
    bar = tqdm(
        total=len(jobs), desc=f"{desc} (submitit {executor}, {len(slots)} at a time)", unit="job", dynamic_ncols=True
    )
    start = time.perf_counter()

    def submit(i: int, k: int, tries: int) -> None:
        job = ex.submit(Job(fn, jobs[i], threads, slots[k], watch_pid))
        running[job] = (i, k, tries)
        tqdm.write(
            f"{desc}: {label(jobs[i])} submitted as job {job.job_id} (logs in {job.paths.folder})", file=sys.stderr
        )

    try:
        while queue or running:
            while queue and free:
                submit(queue.pop(0), free.pop(0), 0)
            time.sleep(POLL_S)
            for job in [j for j in running if j.done()]:
                i, k, tries = running.pop(job)
                try:
                    results[i] = job.result()
                except FailedJobError as e:  # the job raised: it would again
                    raise SystemExit(
                        f"{desc}: {label(jobs[i])} failed (job {job.job_id}, log {job.paths.stderr}): {_last_line(e)}"
                    ) from None
                except UncompletedJobError as e:  # killed, node lost: resume from its checkpoint
                    if tries >= retries:
                        raise SystemExit(
                            f"{desc}: {label(jobs[i])} died {tries + 1} times without a result (job "
                            f"{job.job_id}: {_last_line(e)}); its checkpoint is intact, rerun to "
                            "resume"
                        ) from None
                    tqdm.write(
                        f"{desc}: {label(jobs[i])} (job {job.job_id}) died without a result; resubmitting "
                        "it, it resumes from its checkpoint",
                        file=sys.stderr,
                    )
                    submit(i, k, tries + 1)
                    continue
                free.append(k)
                bar.update()
                tqdm.write(
                    f"{desc}: {label(jobs[i])} {outcome(results[i])} ({time.perf_counter() - start:.0f} s)",
                    file=sys.stderr,
                )
    finally:
        bar.close()
        for job in running:  # interrupted or failed: stop the rest (their checkpoints stay)
            job.cancel(check=False)
    return results
