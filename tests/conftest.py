import pytest
import torch
from tiny_models import make_tiny_config


@pytest.fixture(autouse=True)
def _seed_and_threads():
    torch.manual_seed(0)
    yield


@pytest.fixture
def tiny_config():
    """Factory for a NAC config small enough for CPU unit tests (32 px images, 8x8 tokens)."""
    return make_tiny_config
