"""Datasets: a registry of builders with download -> prepare -> load (see ``nac.data.registry``)."""

from nac.data.registry import DatasetBuilder, available, embedded, get_builder, register

__all__ = ["DatasetBuilder", "available", "embedded", "get_builder", "register"]
