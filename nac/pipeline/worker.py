"""A stage's worker process as one object (``Worker``): whether it runs a job (``busy``), whether
it was told to stop (``stopping``), and the terminal line its job's bars go on (``line``).

``nac.pipeline.pool`` starts the workers; each makes its ``Worker`` at its start (``Worker.start``)
and then runs the jobs the stage hands it, one at a time, each ``with worker.job(threads):``. A
stop signal (``on_signal``, what ``nac.pipeline.lifeline.worker_process`` installs) ends a running
job as Ctrl-C would (its checkpoint intact) and makes an idle worker exit; a worker told to stop
starts no further job. Outside a worker (a stage's main process, a test) there is no ``Worker``:
``current()`` is None and a bar sits where tqdm puts it (``nac.progress.bar_kwargs``).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager


class Worker:
    """This process as a stage's worker (one per process: ``Worker.start``)."""

    _this: Worker | None = None  # the process's worker, once started

    def __init__(self, line: int | None = None):
        if line is not None and line < 1:
            raise ValueError(f"a worker's bar line must be >= 1 (line 0 is the stage's job counter), got {line}")
        self.line = line  # its bars' terminal line (>= 1, under the stage's job counter), or None
        self.busy = False  # a job is running: a stop signal interrupts it
        self.stopping = False  # told to stop: it starts no further job

    @classmethod
    def start(cls, line: int | None = None) -> Worker:
        """This process's worker, made once (a second start replaces the first: a test's)."""
        cls._this = cls(line)
        return cls._this

    def bar_kwargs(self) -> dict:
        """Extra ``tqdm(...)`` arguments for a bar drawn in this worker's job: its line, cleared after."""
        return {} if self.line is None else {"position": self.line, "leave": False}

    @contextmanager
    def job(self, threads: int | None = None):
        """A job's run: refused (the process exits) when told to stop; ``threads`` intra-op threads
        (None: torch's default); ``busy`` meanwhile."""
        if self.stopping:  # told to stop (the stage is ending): start no new job
            os._exit(128 + signal.SIGTERM)
        set_threads(threads)
        self.busy = True
        try:
            yield self
        finally:
            self.busy = False

    def on_signal(self, signum, frame) -> None:
        """A stop signal: a running job ends with its one line (``KeyboardInterrupt``, checkpoint
        intact); an idle worker exits (nothing to save, nothing to say)."""
        self.stopping = True
        if self.busy:
            raise KeyboardInterrupt(signal.Signals(signum).name)
        os._exit(128 + signum)


def current() -> Worker | None:
    """This process's ``Worker``, or None outside a stage's worker."""
    return Worker._this


def set_threads(threads: int | None) -> None:
    """``torch.set_num_threads(threads)`` (None: leave torch's default)."""
    if threads is not None:
        import torch  # deferred: the data stages run without torch (~1.2 s; tests/test_dvc_deps.py)

        torch.set_num_threads(threads)
