"""Importing this module registers every dataset builder."""

from nac.data import (
    embedded,  # noqa: F401
    real,  # noqa: F401
)
