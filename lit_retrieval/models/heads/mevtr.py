"""MeVTR / Me-Retriever's key-event video representation (Zhang et al., ICCV 2023;
arXiv:2308.11551, "mean" scoring): K-medoids over a video's raw frame features picks K key-event frames
(KKZ initialisation, Euclidean distances, at most `iterations` rounds); the medoid frames,
L2-normalised and averaged, give one vector per video (the "mean" variant MELON evaluates), so the
head is indexable. Medoid selection is not differentiable; gradients reach the selected frames.

Difference from the reference, on purpose: only valid frames can become medoids (the reference
clusters padded black frames too and then drops them, silently lowering K). A video with at most
K valid frames uses all of them. MeVTR trains with its own loss on event captions
(`DualEncoderRetrieval(event_loss=MeVTRLoss())`), never with MEA.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lit_retrieval.models.features import TextFeatures, VideoFeatures
from lit_retrieval.models.heads.meanp import MeanPHead


@torch.no_grad()
def kkz_kmedoids(
    frames: torch.Tensor, mask: torch.Tensor, k: int, iterations: int = 100
) -> tuple[torch.Tensor, torch.Tensor]:
    """Medoid frame indices [B, K] in temporal order and their validity [B, K] (False for the
    slots of a video with fewer than K valid frames)."""
    batch, length, _ = frames.shape
    k = min(k, length)
    valid = mask.bool()
    distance = torch.cdist(frames.float(), frames.float())  # [B, T, T]
    big = distance.max() * 4 + 1
    distance = distance.masked_fill(~valid.unsqueeze(1) | ~valid.unsqueeze(2), big)
    counts = valid.sum(1)
    # KKZ: the largest-norm frame, then repeatedly the frame farthest from its nearest medoid
    norms = frames.float().norm(dim=-1).masked_fill(~valid, -1)
    medoids = [norms.argmax(1)]
    nearest = distance.gather(1, medoids[0][:, None, None].expand(-1, 1, length)).squeeze(1)
    for _ in range(1, k):
        candidate = nearest.masked_fill(~valid, -1)
        for chosen in medoids:
            candidate = candidate.scatter(1, chosen[:, None], -1)
        medoids.append(candidate.argmax(1))
        nearest = torch.minimum(
            nearest, distance.gather(1, medoids[-1][:, None, None].expand(-1, 1, length)).squeeze(1)
        )
    medoids = torch.stack(medoids, 1)  # [B, K]
    slot_valid = torch.arange(k, device=frames.device)[None] < counts[:, None]
    for _ in range(iterations):
        to_medoid = distance.gather(2, medoids[:, None, :].expand(-1, length, -1))  # [B, T, K]
        label = to_medoid.masked_fill(~slot_valid[:, None, :], float("inf")).argmin(2)  # [B, T]
        members = F.one_hot(label, k).transpose(1, 2).bool() & valid[:, None, :]  # [B, K, T]
        cost = torch.einsum("bmn,bcn->bcm", distance, members.to(distance.dtype))  # cluster c's cost with medoid m
        cost = cost.masked_fill(~members, float("inf"))
        updated = torch.where(members.any(2) & slot_valid, cost.argmin(2), medoids)
        if torch.equal(updated, medoids):
            break
        medoids = updated
    medoids = torch.where(slot_valid, medoids, length)  # invalid slots sort last
    medoids, order = medoids.sort(1)
    slot_valid = slot_valid.gather(1, order)
    return medoids.clamp_max(length - 1), slot_valid


class MeVTRHead(MeanPHead):
    """Args:
    num_events: K key-event frames per video (reference: 16 of 64 frames).
    iterations: K-medoids rounds at most (reference: 100).
    """

    def __init__(self, num_events: int = 16, iterations: int = 100, **kwargs) -> None:
        super().__init__(pooling="frames", **kwargs)  # pools its key-event frames
        self.num_events = num_events
        self.iterations = iterations

    def key_events(self, video: VideoFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """The medoid frames' features [B, K, D] and their validity [B, K]."""
        index, valid = kkz_kmedoids(video.frames.detach(), video.mask, self.num_events, self.iterations)
        frames = video.frames.gather(1, index.unsqueeze(-1).expand(-1, -1, video.frames.shape[-1]))
        return frames, valid

    def encode_text(self, text: TextFeatures) -> torch.Tensor:
        return F.normalize(text.pooled, dim=-1)

    def encode_video(self, video: VideoFeatures) -> torch.Tensor:
        frames, valid = self.key_events(video)
        return super().encode_video(VideoFeatures(frames=frames, mask=valid))
