"""Plumbing every track and stage shares: params loading and validation, run names and paths,
dataset builders, what every training job does before ``fit`` (``runs.start_run``), JSON IO. Imports no track."""
