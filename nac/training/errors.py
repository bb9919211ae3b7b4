"""The errors that stop a training. ``NonFiniteTrainingError``: the training itself went wrong
(a NaN or infinite loss, gradient norm or weight). ``TrainingStopped``: it ended early for a
reason outside it (Ctrl-C, a full disk), a ``SystemExit`` whose message is the one line saying
which checkpoint is intact. Each message names the run, the epoch and the checkpoint kept."""

from __future__ import annotations

# What to try when a training diverges (every non-finite error ends with it).
ADVICE = "Lower train.lr, enable train.grad_clip, or check the data for NaNs"


class NonFiniteTrainingError(FloatingPointError):
    """Training produced a NaN or infinite value; it stops and the last good checkpoint is kept."""


class NonFiniteLossError(NonFiniteTrainingError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class NonFiniteGradientError(NonFiniteTrainingError):
    """The total gradient norm became NaN or infinite (the step is not applied)."""


class NonFiniteWeightsError(NonFiniteTrainingError):
    """The weights (or the state to checkpoint) became NaN or infinite after an optimizer step."""


class TrainingStopped(SystemExit):
    """Training ended early for a reason outside the training itself. The message is one line
    saying what is kept and how to continue; as a ``SystemExit`` it makes a stage exit non-zero
    printing just that line (``code`` is the message)."""


class TrainingInterrupted(TrainingStopped):
    """Ctrl-C (``KeyboardInterrupt``) during training; the last checkpoint is intact."""


class CheckpointWriteFailed(TrainingStopped):
    """The checkpoint could not be written (full disk); the previous one is intact."""
