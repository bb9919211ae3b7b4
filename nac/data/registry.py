"""Dataset registry: every dataset is a ``DatasetBuilder`` with download -> prepare -> load.

- ``download()`` fetches (real data, checksummed) or generates (embedded data, from a seed) the
  raw files under ``<root>/raw/<name>/``.
- ``prepare()`` decodes / tokenizes once and writes arrays under ``<root>/cache/<name>/`` with a
  ``manifest.json`` recording the parameters that produced them (the *tokenization cache*).
- ``load(split)`` returns a ``torch.utils.data.Dataset`` that reads only the cache. Items are
  dicts: always ``"input"`` and ``"label"``; optionally ``"mask"``, ``"style"``, ``"cond"``, ...

Builders register themselves by name with ``@register``; ``get_builder(name, root, params)``
looks them up and rejects unknown names with the list of valid ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the data stages (download, prepare) run without importing torch
    import torch


_REGISTRY: dict[str, type["DatasetBuilder"]] = {}


def register(name: str) -> Callable[[type["DatasetBuilder"]], type["DatasetBuilder"]]:
    def deco(cls: type[DatasetBuilder]) -> type[DatasetBuilder]:
        if name in _REGISTRY:
            raise ValueError(f"dataset {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def available() -> list[str]:
    _import_all()
    return sorted(_REGISTRY)


def get_builder(name: str, root: str | Path = "data", params: dict[str, Any] | None = None) -> "DatasetBuilder":
    _import_all()
    if name not in _REGISTRY:
        raise KeyError(f"unknown dataset {name!r}; valid choices: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name](root, params or {})


def embedded() -> list[str]:
    """The embedded datasets (generated offline from a seed, all by dvc.yaml's ``generate`` stage);
    every other one is downloaded (``data.downloads``: one download and one prepare stage each)."""
    _import_all()
    return sorted(name for name, cls in _REGISTRY.items() if cls.embedded)


def _import_all() -> None:
    # Builders live in sibling modules and register on import (a plugin registry). Deferred: each
    # builder module imports `register` and `DatasetBuilder` from here, so importing them at this
    # module's top would be a cycle; the first lookup imports them all, once.
    from nac.data import builders  # noqa: F401


class DatasetBuilder:
    """Base class. Subclasses set ``defaults`` (their params with default values) and implement
    ``download``, ``prepare`` and ``load``."""

    name: str = ""
    defaults: dict[str, Any] = {}
    # ``{param: (lo, hi)}``: the range params.yaml may set a numeric param to (``hi`` None: no upper
    # bound), where the schema's rule by name (sizes >= 1, seeds >= 0, ...) does not fit it
    ranges: dict[str, tuple[float, float | None]] = {}
    embedded: bool = False  # generated offline from a seed (True) or downloaded

    def __init__(self, root: str | Path, params: dict[str, Any]):
        unknown = set(params) - set(self.defaults)
        if unknown:
            raise ValueError(
                f"dataset {self.name!r}: unknown params {sorted(unknown)}; valid params: {sorted(self.defaults)}"
            )
        self.root = Path(root)
        self.params = {**self.defaults, **params}

    @property
    def raw_dir(self) -> Path:
        return self.root / "raw" / self.name

    @property
    def cache_dir(self) -> Path:
        return self.root / "cache" / self.name

    def download(self) -> None:
        raise NotImplementedError

    def prepare(self) -> None:
        raise NotImplementedError

    def load(self, split: str) -> torch.utils.data.Dataset:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """Facts a model needs: ``num_classes``, ``class_names``, input kind and shape, ..."""
        raise NotImplementedError
