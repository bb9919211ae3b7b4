"""The dvclive log of a training (``fit``'s ``live_dir``): one entry per epoch."""

from __future__ import annotations


def open_live(live_dir, history):
    """dvclive logger; the history from a resumed checkpoint is replayed so the logged curves
    are identical to an uninterrupted run's. Kept by hand rather than dvclive's ``resume=True``:
    that resumes one logged step at step 0 and trusts files that can lag the checkpoint
    (``tests/test_training.py::test_resumed_run_logs_the_dvclive_files_of_an_uninterrupted_run``)."""
    if live_dir is None:
        return None
    from dvclive import Live  # deferred: dvclive costs ~0.6 s, paid only by a run that logs

    live = Live(dir=str(live_dir), resume=False, save_dvc_exp=False, dvcyaml=False)
    for entry in history:
        log_live(live, entry)
    return live


def close_live(live) -> None:
    """End a dvclive log without ``Live.end()``. Each ``next_step`` has already written what this
    suite reads (metrics.json, the plots' .tsv); what ``end()`` adds is DVC-experiment bookkeeping
    the stages do not use (they declare the files as outs): under ``dvc exp run`` it builds DVC's
    repo index in every job (1.4 s; docs/costs.md), and pooled workers race to remove dvclive's one
    step signal file (FileNotFoundError). The signal file is removed here, tolerating a worker that
    removed it first."""
    from dvclive.vscode import cleanup_dvclive_step_completed  # deferred: as above

    try:
        cleanup_dvclive_step_completed()
    except FileNotFoundError:
        pass


def log_live(live, entry: dict) -> None:
    """One epoch's ``entry`` (``{"epoch", "train_loss", ...}``) as dvclive metrics, then its step."""
    if live is None:
        return
    for k, v in entry.items():
        if k != "epoch":
            live.log_metric(k.replace("_", "/", 1), v, plot=True)
    live.next_step()
