"""The dataset builders of params.yaml's sections (``data.<name>`` under ``data.root``)."""

from __future__ import annotations

from typing import Any

from nac.data.registry import get_builder


def data_root(data: dict) -> str:
    """params.yaml's ``data.root`` (where the datasets are downloaded and cached; default ``data``)."""
    return data.get("root", "data")


def builder(params: dict, name: str):
    """The builder of dataset ``name`` with its ``data.<name>`` params under ``data.root``."""
    data = params["data"]
    return get_builder(name, data_root(data), data.get(name) or {})


def track_builder(params: dict, section: str):
    """The builder of the dataset a params section (``points``, ``nlvr``, ...) trains on."""
    return builder(params, params[section]["dataset"])


def dataset_info(params: dict, name: str) -> dict[str, Any] | None:
    """The dataset's info when it can be computed before download (embedded data), else None."""
    try:
        return builder(params, name).info()
    except Exception:  # real datasets read parts of their info from the cache
        return None
