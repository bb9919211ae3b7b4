"""Fixtures for the embedded-dataset tests: build a dataset in a temporary root, snapshot a cache."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def build_dataset(tmp_path):
    """``build_dataset(cls, sub="a", **params)``: download + prepare ``cls`` under ``tmp_path/sub``."""

    def _build(cls, sub: str = "a", **params):
        builder = cls(tmp_path / sub, params)
        builder.download()
        builder.prepare()
        return builder

    return _build


@pytest.fixture
def cache_files():
    """``cache_files(builder)``: {relative path: file bytes} of every file in the cache folder."""

    def _read(builder) -> dict[str, bytes]:
        root = Path(builder.cache_dir)
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    return _read
