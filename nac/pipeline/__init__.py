"""Plumbing every track and stage shares: params loading and validation, run names and paths,
dataset builders, the one build-then-fit (``runs.train_run``), JSON IO. Imports no track."""
