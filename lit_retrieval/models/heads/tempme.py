"""TempMe: temporal token merging inside the ViT (Shen et al., ICLR 2025, arXiv:2409.01156).

TempMe is an encoder-side method: the score is CLIP4Clip-meanP's cosine between the text's EOT
feature and the mean of the frames' class tokens, but the frame tower runs with token merging
(`TokenMerging`, installed through the encoder's `set_vision_forward`) and both towers are tuned
with LoRA adapters (peft) on their query/key/value projections. By default only the adapters and
the frame-position embeddings of the merge layers train; the logit scale stays frozen.

Merging schedule (defaults of the reference code for ViT-B/32 with 12 frames):
- image merging (ImgMe) in the blocks before the first merge layer: after attention, `image_r`
  tokens per frame merge into others by bipartite soft matching on the head-averaged keys
  (class tokens excluded; merged tokens are size-weighted averages; attention is proportional:
  log(size) is added to the logits). As in ToMe and the reference, sets A and B alternate over the
  whole sequence: with one class token (an odd count) the odd positions after it form A;
- clip merging (ClipMe) at each merge layer: groups of `merge_frames[i]` adjacent clips become
  one sequence (all class tokens first, then all other tokens); cross-clip merging of
  floor(cross_ratio * n * r_f) tokens, matched on the detached hidden states *before* the layer's
  frame-position embedding is added to every token (the reference adds it only when this count is
  positive), then attention, then intra-clip merging of floor(intra_ratio * remaining) tokens
  (matched on the keys); each count is capped at half the mergeable tokens;
- the blocks after the first merge layer that are not merge layers merge intra_ratio of the
  tokens after attention.
Every class token survives, so the video keeps one state per frame.

Differences from the reference (LunarShen/TempMe), each with its reason:
- a video with fewer valid frames than `num_frames` is filled by repeating its frames cyclically
  and only its own frames' class tokens are returned (the reference encodes the zero-filled
  padding frames too, whose tokens then merge with real ones);
- the image-merging count is capped at half the mergeable tokens like the other counts (the
  reference fails when `image_r` exceeds it, e.g. on small images);
- LoRA comes from peft: separate rank-r adapters on q, k and v (the reference shares one
  down-projection across q, k, v, with three up-projections); both start as an exact zero update;
- `enabled: false` runs the same blocks without merging, which reproduces the plain ViT exactly
  (for checks).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from peft import LoraConfig, inject_adapter_in_model
from torch import nn

from lit_retrieval.errors import ConfigError
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.models.heads.meanp import masked_mean


def bipartite_merge(
    x: torch.Tensor, size: torch.Tensor, metric: torch.Tensor, r: int, protect: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """ToMe's bipartite soft matching as TempMe runs it: the first `protect` (class) tokens stay; the
    others alternate between sets A and B, each A token's most similar B token (cosine of `metric`)
    is its match, and the `r` best-matched A tokens are merged into their matches as size-weighted
    averages. The sets alternate over the whole sequence, class tokens included, so A starts at the
    first token after them when `protect` is even and at the second when it is odd (TempMe's
    `bipartite_soft_matching`; ToMe's one class token makes the odd body positions A). `x` [S, N, C],
    `size` [S, N, 1]; returns the shorter `x` and `size`: class tokens, kept A tokens in order, then
    the B tokens."""
    body = x.shape[1] - protect
    r = min(r, body // 2)
    if r <= 0:
        return x, size
    first = protect % 2  # body offset of set A
    m = F.normalize(metric[:, protect:].float(), dim=-1)
    a, b = m[:, first::2], m[:, 1 - first :: 2]
    best, match = (a @ b.transpose(1, 2)).max(-1)  # [S, Na]
    order = best.argsort(-1, descending=True)
    merged, kept = order[:, :r], order[:, r:].sort(-1).values
    xs, sizes = x[:, protect:] * size[:, protect:], size[:, protect:]
    xa, xb, sa, sb = xs[:, first::2], xs[:, 1 - first :: 2], sizes[:, first::2], sizes[:, 1 - first :: 2]
    channels = x.shape[-1]
    target = match.gather(1, merged)
    xb = xb.scatter_add(
        1, target[..., None].expand(-1, -1, channels), xa.gather(1, merged[..., None].expand(-1, -1, channels))
    )
    sb = sb.scatter_add(1, target[..., None], sa.gather(1, merged[..., None]))
    keep_x = xa.gather(1, kept[..., None].expand(-1, -1, channels))
    keep_s = sa.gather(1, kept[..., None])
    new_size = torch.cat([size[:, :protect], keep_s, sb], 1)
    new_x = torch.cat([x[:, :protect], keep_x / keep_s, xb / sb], 1)
    return new_x, new_size


def attention(block: nn.Module, hidden: torch.Tensor, size: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """A CLIP block's attention on normalised `hidden` [S, N, C], with log(size) added to every
    key's logit when `size` is given (proportional attention); returns (output, head-mean keys)."""
    attn = block.self_attn
    shape = (*hidden.shape[:-1], -1, attn.head_dim)
    q, k, v = (proj(hidden).view(shape).transpose(1, 2) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    bias = None if size is None else size.log().view(size.shape[0], 1, 1, -1).to(q.dtype)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=attn.scale)
    out = attn.out_proj(out.transpose(1, 2).reshape(*hidden.shape[:-1], -1))
    return out, k.mean(1)


class TokenMerging(nn.Module):
    """TempMe's vision forward (see the module notes); holds the frame-position embeddings.

    Args:
        num_frames: frames per video T (the product of `merge_frames` must divide it).
        layers: vision blocks of the encoder.
        width: the vision width C.
        image_r: tokens merged per frame in each ImgMe block (2).
        merge_layers / merge_frames: the ClipMe blocks and the clips grouped at each ([8, 9, 10],
            [2, 2, 3] for 12 blocks; scaled to the encoder's depth by the head when unset).
        cross_ratio / intra_ratio: 0.30 and 0.10.
        proportional_attention: add log(size) to the attention logits (on in the reference).
        enabled: merge at all (off: the plain ViT, for checks).
    """

    def __init__(
        self,
        num_frames: int,
        layers: int,
        width: int,
        image_r: int = 2,
        merge_layers: list[int] = (8, 9, 10),
        merge_frames: list[int] = (2, 2, 3),
        cross_ratio: float = 0.30,
        intra_ratio: float = 0.10,
        proportional_attention: bool = True,
        enabled: bool = True,
    ) -> None:
        super().__init__()
        if len(merge_layers) != len(merge_frames) or list(merge_layers) != sorted(set(merge_layers)):
            raise ConfigError(f"merge_layers {merge_layers} must be increasing and match merge_frames {merge_frames}")
        if any(not 0 <= layer < layers for layer in merge_layers):
            raise ConfigError(f"merge_layers {merge_layers} must lie in the encoder's {layers} blocks")
        if num_frames % math.prod(merge_frames):
            raise ConfigError(f"num_frames {num_frames} is not divisible by the product of merge_frames {merge_frames}")
        self.num_frames, self.layers = num_frames, layers
        self.image_r, self.cross_ratio, self.intra_ratio = image_r, cross_ratio, intra_ratio
        self.merge_frames = dict(zip(merge_layers, merge_frames))
        self.proportional_attention, self.enabled = proportional_attention, enabled
        clips, tables = num_frames, []
        for group in merge_frames:
            tables.append(nn.Parameter(torch.zeros(clips, width)))
            clips //= group
        self.frame_positions = nn.ParameterList(tables)
        self.token_counts: list[int] = []

    def forward(self, vision: nn.Module, pixels: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        lengths = lengths.to(pixels.device)
        if (lengths > self.num_frames).any():
            raise ValueError(f"a video has {int(lengths.max())} frames but TempMe was built for {self.num_frames}")
        starts = torch.cumsum(lengths, 0) - lengths
        offsets = torch.arange(self.num_frames, device=pixels.device)
        index = (starts[:, None] + offsets[None] % lengths[:, None]).reshape(-1)  # short videos repeat their frames
        hidden = vision.pre_layrnorm(vision.embeddings(pixels[index]))
        videos = len(lengths)
        size = torch.ones(*hidden.shape[:2], 1, device=hidden.device, dtype=hidden.dtype)
        cls_per_clip, merging_started, table = 1, False, 0
        self.token_counts = [hidden.shape[0] * hidden.shape[1] // videos]
        for depth, block in enumerate(vision.encoder.layers):
            if self.enabled and depth in self.merge_frames:
                group = self.merge_frames[depth]
                positions = self._positions(table, hidden, videos).expand_as(hidden)
                hidden, size, positions = (self._group(t, cls_per_clip, group) for t in (hidden, size, positions))
                cls_per_clip *= group
                merge = int(self.cross_ratio * hidden.shape[1])
                if merge > 0:  # matched on the states before the frame positions, which join only a merging layer
                    metric = hidden.detach()
                    hidden, size = bipartite_merge(hidden + positions, size, metric, merge, cls_per_clip)
                merging_started, table = True, table + 1
            attended, keys = attention(
                block, block.layer_norm1(hidden), size if self.enabled and self.proportional_attention else None
            )
            hidden = hidden + attended
            if self.enabled:
                if merging_started:
                    merge = int(self.intra_ratio * hidden.shape[1])
                else:
                    merge = self.image_r
                hidden, size = bipartite_merge(hidden, size, keys, merge, cls_per_clip)
            hidden = hidden + block.mlp(block.layer_norm2(hidden))
            self.token_counts.append(hidden.shape[0] * hidden.shape[1] // videos)
        cls = hidden[:, :cls_per_clip].reshape(videos, self.num_frames, -1)
        return torch.cat([cls[v, : int(n)] for v, n in enumerate(lengths)])

    def _positions(self, table: int, hidden: torch.Tensor, videos: int) -> torch.Tensor:
        """The layer's frame-position embedding of every clip, broadcast over its tokens."""
        clips = hidden.shape[0] // videos
        return self.frame_positions[table][:clips].repeat(videos, 1)[:, None, :].to(hidden.dtype)

    @staticmethod
    def _group(t: torch.Tensor, cls: int, group: int) -> torch.Tensor:
        """`group` adjacent clips of `t` [clips, tokens, channels] -> one sequence: their class
        tokens first, then their other tokens."""
        clips, tokens, channels = t.shape
        t = t.reshape(clips // group, group, tokens, channels)
        heads = t[:, :, :cls].reshape(clips // group, group * cls, channels)
        rest = t[:, :, cls:].reshape(clips // group, group * (tokens - cls), channels)
        return torch.cat([heads, rest], 1)


def default_schedule(layers: int) -> list[int]:
    """The reference's merge layers (8, 9, 10 of 12 blocks) scaled to `layers` blocks."""
    return sorted({min(layers - 1, max(1, round(k * layers / 12))) for k in (8, 9, 10)})


class TempMeHead(SimilarityHead):
    """TempMe (see the module notes). Indexable: one vector per side.

    Args:
        num_frames: T, the data module's frames (12 in the reference; 64 for MELON).
        image_r / merge_layers / merge_frames / cross_ratio / intra_ratio /
            proportional_attention / merging: the `TokenMerging` schedule (`merge_layers: null`
            scales the reference's 8-9-10 of 12 blocks to the encoder's depth).
        lora_rank / lora_alpha / lora_dropout: the adapters (r = 8; alpha = r keeps the
            reference's unscaled B A update).
        lora_targets: projection names that get adapters in either tower (CLIP: q/k/v_proj;
            BERT-style text towers: query/key/value).
        train_backbone: also train every encoder weight (the paper's full fine-tuning variant,
            not in the released code); off = only adapters and frame positions train.
    """

    indexable = True

    def __init__(
        self,
        num_frames: int = 12,
        image_r: int = 2,
        merge_layers: list[int] | None = None,
        merge_frames: list[int] | None = None,
        cross_ratio: float = 0.30,
        intra_ratio: float = 0.10,
        proportional_attention: bool = True,
        merging: bool = True,
        lora_rank: int = 8,
        lora_alpha: float = 8.0,
        lora_dropout: float = 0.0,
        lora_targets: list[str] | None = None,
        train_backbone: bool = False,
        learn_logit_scale: bool = False,
        **kwargs,
    ) -> None:
        super().__init__(learn_logit_scale=learn_logit_scale, **kwargs)
        self.num_frames = num_frames
        self.schedule = {
            "image_r": image_r,
            "cross_ratio": cross_ratio,
            "intra_ratio": intra_ratio,
            "proportional_attention": proportional_attention,
            "enabled": merging,
        }
        self.merge_layers, self.merge_frames = merge_layers, merge_frames or [2, 2, 3]
        self.lora = LoraConfig(
            r=lora_rank,
            lora_alpha=lora_alpha,
            lora_dropout=lora_dropout,
            target_modules=lora_targets or ["q_proj", "k_proj", "v_proj", "query", "key", "value"],
        )
        self.train_backbone = train_backbone
        self.merger: TokenMerging | None = None

    def bind(self, encoder: VideoTextEncoder) -> None:
        vision = getattr(encoder, "vision", None)
        if vision is None:
            raise ConfigError(
                f"model.head: TempMeHead merges tokens inside Hugging Face CLIP's ViT; {type(encoder).__name__} "
                "has no such frame tower (use CLIPEncoder)"
            )
        layers = len(vision.encoder.layers)
        merge_layers = self.merge_layers if self.merge_layers is not None else default_schedule(layers)
        self.merger = TokenMerging(
            self.num_frames,
            layers,
            vision.config.hidden_size,
            merge_layers=merge_layers,
            merge_frames=self.merge_frames,
            **self.schedule,
        )
        text = getattr(encoder, "text", None)
        text_model = getattr(text, "text_model", None) if hasattr(text, "text_model") else getattr(text, "model", None)
        for tower in (vision, text_model):
            names = {name.rsplit(".", 1)[-1] for name, _ in tower.named_modules()} if tower is not None else set()
            if names & set(self.lora.target_modules):
                inject_adapter_in_model(self.lora, tower)
        for name, param in encoder.named_parameters():  # peft leaves only the adapters trainable
            param.requires_grad_(self.train_backbone or ".lora_" in name)
        # a bound method, not the module: the merger's parameters belong to the head alone
        encoder.set_vision_forward(self.merger.forward)

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return F.normalize(text.pooled, dim=-1)

    def encode_video(self, video: VideoFeatures) -> torch.Tensor:
        return F.normalize(masked_mean(F.normalize(video.frames, dim=-1), video.mask), dim=-1)

    def score(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return text_rep @ video_rep.t()

    def score_pairs(self, text_rep: torch.Tensor, video_rep: torch.Tensor) -> torch.Tensor:
        return (text_rep * video_rep).sum(-1)
