"""A stage's processes stop when they are told to, and when whoever started them dies.

``SIGTERM`` (what ``timeout`` and ``kill`` send) and ``SIGHUP`` (a closed terminal) are handled
like ``SIGINT``: they raise ``KeyboardInterrupt`` where the process is, so a training ends with
the one line that says which checkpoint is intact (``nac.training.errors.TrainingInterrupted``).

A stage started by ``dvc repro`` (or ``dvc exp run``) watches its launcher: when the ``dvc`` process dies (even by
``kill -9``, which it cannot forward), the stage sends itself ``SIGTERM`` within a second, and its
worker processes, which die with their parent (Linux ``PR_SET_PDEATHSIG``) and watch it too, stop
the same way; the per-epoch checkpoints are written atomically, so a rerun resumes them. The
launcher is the parent, or the grandparent when the parent is a shell (``sh -c``, as DVC may run
a stage's command) that would outlive it. The stop is sent to the main thread itself (a signal the
kernel hands to another thread would not wake a main thread blocked on a lock), and it is bounded:
a process whose graceful stop has not ended ``HARD_STOP_S`` seconds later prints where each of its
threads stands and kills its children and itself, so nothing outlives its launcher by more.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from nac import repo

STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
_SHELLS = {"sh", "bash", "dash", "zsh", "ksh", "fish"}
_PR_SET_PDEATHSIG = 1
POLL_S = 0.5
HARD_STOP_S = 60.0  # > nac.pipeline.pool.STOP_GRACE_S: a stage's graceful stop waits that long for its workers


def _interrupt(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def handle_stop_signals(handler=_interrupt) -> None:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread, as SIGINT does; a signal
    this process was started ignoring stays ignored (``nohup`` ignores SIGHUP)."""
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) != signal.SIG_IGN:
            signal.signal(sig, handler)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask Linux to send ``sig`` to this process when its parent dies (no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the watch thread still covers it
        pass


def _identity(pid: int) -> tuple[int, float] | None:
    """``(pid, start time)``: a pid reused by another process is not mistaken for the launcher."""
    try:
        return pid, psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(ident: tuple[int, float]) -> bool:
    try:
        return psutil.Process(ident[0]).create_time() == ident[1]
    except psutil.Error:
        return False


def launchers() -> list[tuple[int, float]]:
    """The processes whose death stops this one: the parent, and its parent when the parent is a
    shell. Nothing when the parent is init (already orphaned, or started by a service manager)."""
    out = []
    pid = os.getppid()
    for _ in range(2):
        if pid <= 1:
            break
        ident = _identity(pid)
        if ident is None:
            break
        out.append(ident)
        try:
            proc = psutil.Process(pid)
            if proc.name() not in _SHELLS:
                break
            pid = proc.ppid()
        except psutil.Error:
            break
    return out


def _hard_stop(why: str) -> None:
    """The graceful stop did not end: say where it hung, then SIGKILL this process's children and itself."""
    try:
        print(f"{why}; where each thread stands:", file=sys.stderr, flush=True)
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (OSError, ValueError):  # no stderr left: the kill matters more than the report
        pass
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        children = []
    for child in children:
        try:
            child.kill()
        except psutil.Error:
            pass
    os.kill(os.getpid(), signal.SIGKILL)


def watch(
    idents: list[tuple[int, float]],
    sig: int = signal.SIGTERM,
    poll_s: float = POLL_S,
    hard_stop_s: float | None = HARD_STOP_S,
) -> threading.Thread | None:
    """A daemon thread that sends ``sig`` to this process's main thread once any of ``idents`` has
    died, and kills the process (children first) if it is still running ``hard_stop_s`` later."""
    if not idents:
        return None
    main = threading.main_thread().ident

    def run():
        while all(_alive(i) for i in idents):
            time.sleep(poll_s)
        signal.pthread_kill(main, sig)
        if hard_stop_s is not None:
            time.sleep(hard_stop_s)
            _hard_stop(f"pid {os.getpid()}: still running {hard_stop_s:.0f} s after its launcher died")

    t = threading.Thread(target=run, name="nac-lifeline", daemon=True)
    t.start()
    return t


def stage_process() -> None:
    """For a stage script's main process: stop signals like Ctrl-C, and, when DVC started it (DVC
    sets ``DVC_STAGE`` for a stage's command), stop when that launcher dies. A script started by
    hand is not watched: ``nohup python -m stages.train &`` outlives its shell, as it should."""
    handle_stop_signals()
    if os.environ.get("DVC_STAGE"):
        idents = launchers()
        if not idents and orphaned():  # the launcher died before this process could watch it
            os.kill(os.getpid(), signal.SIGTERM)
        watch(idents)


def orphaned() -> bool:
    """This process was adopted by init: its parent is pid 1 and pid 1 is not a ``dvc`` process (in
    a container ``dvc repro`` may itself be pid 1). Unreadable pid 1: not orphaned (no guess)."""
    if os.getppid() != 1:
        return False
    try:
        return not any("dvc" in os.path.basename(arg) for arg in psutil.Process(1).cmdline()[:3])
    except psutil.Error:
        return False


def worker_process(parent_pid: int, on_signal) -> None:
    """For a stage's worker process (started by ``parent_pid``): stop signals handled by
    ``on_signal`` (``nac.pipeline.worker.Worker.on_signal``: a running job ends as Ctrl-C would, an
    idle worker exits), and stop when the stage dies."""
    handle_stop_signals(on_signal)
    die_with_parent()
    if os.getppid() != parent_pid:  # the stage died before the line above took effect
        os.kill(os.getpid(), signal.SIGTERM)
    watch([i for i in [_identity(parent_pid)] if i is not None])


CHECKPOINTS_KEPT = "every finished epoch's checkpoint is intact; rerun to resume"


def foreign_nac(main, name: str) -> None:
    """Refuse, in one line, a stage script whose ``nac`` is not its own checkout's: run by hand as
    ``python stages/<name>.py``, Python puts ``stages/`` first on the path and imports whatever ``nac`` is
    installed (another checkout's, say), where ``python -m stages.<name>`` from the checkout (dvc.yaml's
    command) imports its own."""

    script = Path(main.__code__.co_filename).resolve()
    own, got = script.parents[1], repo.ROOT
    if own != got and (own / "nac" / "__init__.py").is_file():  # (a script outside any checkout: no claim)
        raise SystemExit(
            f"{name}: {script.name} imports nac from {got}, not from its own checkout {own}: run it as dvc.yaml "
            f"does (python -m stages.{script.stem}, from {own}), or install this checkout (pip install -e {own})"
        )


def run_stage(main, name: str, kept: str = CHECKPOINTS_KEPT) -> None:
    """Run a stage script's ``main()`` as ``stage_process`` says; an interruption outside a
    training (which says its own line) ends the stage with one line, not a traceback, saying
    what is ``kept``."""
    foreign_nac(main, name)
    try:
        stage_process()  # inside the try: a launcher already gone stops the stage with the one line
        main()
    except KeyboardInterrupt as e:
        how = e.args[0] if e.args else "SIGINT"
        raise SystemExit(f"{name}: interrupted ({how}); {kept}") from None
