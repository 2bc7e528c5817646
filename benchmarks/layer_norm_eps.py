"""How much the cross/temporal transformers' LayerNorm eps (CLIP4Clip's 1e-12 vs CLIP's 1e-5)
moves each head's logits at the reference's initialisation. Prints one JSON line.

Every head is built twice on the same random CLIP at ViT-B/32's joint width (512, 8 heads, 4
blocks copied from the text tower as CLIP4Clip does), with identical weights and only the eps
changed; the heads' own new layers get the reference's N(0, 0.02) init. Inputs are random
features with unit variance per dimension (8 texts of 20 words, 8 videos of 12 frames). The
figure is the largest absolute change of the logits (scores times the head's exp(logit_scale),
100 at init) over the 8 x 8 pairs.
"""

from __future__ import annotations

import json
import tempfile

import torch

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.encoders.tiny import save_tiny_clip
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads import PAUHead, SeqTransfHead, TightTransfHead, UATVRHead, XCLIPHead

WIDTH, TEXTS, WORDS, VIDEOS, FRAMES = 512, 8, 20, 8, 12
HEADS = {
    "uatvr": lambda eps: UATVRHead(max_frames=FRAMES + 2, max_words=WORDS + 2, layer_norm_eps=eps),
    "seqTransf": lambda eps: SeqTransfHead(layer_norm_eps=eps),
    "tightTransf": lambda eps: TightTransfHead(max_frames=FRAMES, dropout=0.0, layer_norm_eps=eps),
    "xclip": lambda eps: XCLIPHead(max_words=WORDS, max_frames=FRAMES, layer_norm_eps=eps),
    "pau": lambda eps: PAUHead(max_frames=FRAMES, layer_norm_eps=eps),
}


def features() -> tuple[TextFeatures, VideoFeatures]:
    g = torch.Generator().manual_seed(0)
    text = TextFeatures(
        pooled=torch.randn(TEXTS, WIDTH, generator=g),
        tokens=torch.randn(TEXTS, WORDS, WIDTH, generator=g),
        mask=torch.ones(TEXTS, WORDS, dtype=torch.bool),
    )
    video = VideoFeatures(
        frames=torch.randn(VIDEOS, FRAMES, WIDTH, generator=g), mask=torch.ones(VIDEOS, FRAMES, dtype=torch.bool)
    )
    return text, video


def logits(encoder: CLIPEncoder, make, eps: float, state: dict | None) -> tuple[torch.Tensor, dict]:
    torch.manual_seed(0)
    head = make(eps)
    head.bind(encoder)
    if state is not None:
        head.load_state_dict(state)
    head.eval()
    text, video = features()
    with torch.no_grad():
        return head.logits(head.score(head.encode_text(text), head.encode_video(video))), head.state_dict()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = save_tiny_clip(tmp, width=WIDTH, layers=4, embed_dim=WIDTH)
        encoder = CLIPEncoder(pretrained=str(path)).eval()
        result = {}
        for name, make in HEADS.items():
            reference, state = logits(encoder, make, 1e-12, None)
            previous, _ = logits(encoder, make, 1e-5, state)
            result[f"{name}_max_abs_logit_change"] = float((reference - previous).abs().max())
    print(json.dumps({"benchmark": "layer_norm_eps", "width": WIDTH, **result}))


if __name__ == "__main__":
    main()
