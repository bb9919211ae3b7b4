"""Where a job's progress bars go: in a pooled stage each worker draws on its own line.

A stage's pool (``nac.pipeline.pool``) shows its job counter on the first line; worker ``k``
(1-based) draws its running job's bars on line ``k + 1`` and clears them when the job ends, so a
long stage shows, per worker, the epoch and step of the model it trains. Outside a worker a bar
sits where tqdm puts it. The workers share one lock for the terminal (``tqdm.set_lock``).
"""

from __future__ import annotations

_WORKER_LINE: dict = {}


def set_worker_line(position: int, lock=None) -> None:
    """In a pool worker: its bars go on line ``position`` (>= 1, under the stage's job counter)."""
    from tqdm.auto import tqdm

    if position < 1:
        raise ValueError(f"a worker's bar line must be >= 1 (line 0 is the stage's job counter), got {position}")
    _WORKER_LINE.update(position=int(position), leave=False)
    if lock is not None:
        tqdm.set_lock(lock)


def bar_kwargs() -> dict:
    """Extra ``tqdm(...)`` arguments for a bar drawn inside a job: its worker's line, or nothing."""
    return dict(_WORKER_LINE)
