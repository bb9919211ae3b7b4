"""Training: the loop (``loop.fit``), checkpointing and resume (``checkpointing``), the training
config (``config.TrainConfig``), data augmentation (``augment``) and DDP helpers
(``distributed``). Submodules are imported where they are used."""
