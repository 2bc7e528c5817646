from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.encoders.clip import CLIPEncoder
from lit_retrieval.models.encoders.longclip import load_longclip_checkpoint, stretch_position_embedding

__all__ = ["CLIPEncoder", "VideoTextEncoder", "load_longclip_checkpoint", "stretch_position_embedding"]
