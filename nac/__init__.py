"""nac: Neural Attentive Circuits (Weiss, Rahaman et al., NeurIPS 2022), reproduced.

The public names (``from nac import ModelConfig, build_model``) are loaded on first use
(PEP 562), so that ``import nac.data.download`` does not import the model code: a DVC stage
that only downloads or caches data then does not depend on it (``tests/test_dvc_deps.py``
resolves these names through ``_LAZY``)."""

from importlib import import_module

__version__ = "0.1.0"
_LAZY = {"NAC": "nac.model", "build_model": "nac.registry", "ModelConfig": "nac.config", "VARIANTS": "nac.config"}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'nac' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
