"""nac: Neural Attentive Circuits (Weiss, Rahaman et al., NeurIPS 2022), reproduced."""
from nac.config import VARIANTS, ModelConfig
from nac.model import NAC, build_model

__version__ = "0.1.0"
__all__ = ["NAC", "ModelConfig", "VARIANTS", "build_model", "__version__"]
