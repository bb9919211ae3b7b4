"""Where a job's progress bars go: in a pooled stage each worker draws on its own line.

A stage's pool (``nac.pipeline.pool``) shows its job counter on the first line; worker ``k``
(1-based) draws its running job's bars on line ``k + 1`` and clears them when the job ends, so a
long stage shows, per worker, the epoch and step of the model it trains. The line is the
worker's (``nac.pipeline.worker.Worker.line``); outside a worker a bar sits where tqdm puts it.
The workers share one lock for the terminal (``tqdm.set_lock``).
"""

from __future__ import annotations

from nac.pipeline.worker import current


def bar_kwargs() -> dict:
    """Extra ``tqdm(...)`` arguments for a bar drawn inside a job: its worker's line, or nothing."""
    worker = current()
    return {} if worker is None else worker.bar_kwargs()
