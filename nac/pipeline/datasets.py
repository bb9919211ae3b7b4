"""The dataset builders of params.yaml's sections (``data.<name>`` under ``data.root``)."""

from __future__ import annotations

from typing import Any

from nac.data.registry import get_builder


def data_root(data: dict) -> str:
    """params.yaml's ``data.root`` (where the datasets are downloaded and cached; default ``data``)."""
    return data.get("root", "data")


def builder(data: dict, name: str):
    """The builder of dataset ``name`` with its ``data.<name>`` params under ``data.root``, from
    the ``data`` section as params.yaml gives it."""
    return get_builder(name, data_root(data), data.get(name) or {})


def dataset_info(params: dict, name: str) -> dict[str, Any] | None:
    """The dataset's info when it can be computed before download (embedded data), else None."""
    try:
        return builder(params["data"], name).info()
    except Exception:  # real datasets read parts of their info from the cache
        return None
