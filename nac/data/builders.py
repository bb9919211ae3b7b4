"""Importing this module registers every dataset builder."""
from nac.data import embedded  # noqa: F401
from nac.data import real  # noqa: F401
