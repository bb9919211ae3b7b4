"""Training: the loop (``loop.fit``), a run's checkpoint and its resume (``resume``), the
finiteness checks (``checks``), the errors that stop a training (``errors``), the weights' EMA
(``ema``), the training config (``config.TrainConfig``), data augmentation (``augment``) and DDP
helpers (``distributed``). Submodules are imported where they are used."""
