"""Video-text backbones (`VideoTextEncoder`): frames and text in, token-level `EncoderFeatures` out."""

from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.encoders.clip import CLIPEncoder
from lit_retrieval.models.encoders.longclip import load_longclip_checkpoint, stretch_position_embedding
from lit_retrieval.models.encoders.openclip import OpenCLIPEncoder
from lit_retrieval.models.encoders.siglip import SiglipEncoder

__all__ = [
    "CLIPEncoder",
    "OpenCLIPEncoder",
    "SiglipEncoder",
    "VideoTextEncoder",
    "load_longclip_checkpoint",
    "stretch_position_embedding",
]
