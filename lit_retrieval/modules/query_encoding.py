"""Multi-event queries as text features: the events joined into one text (MELON Sec. 4.2,
`concat`), or each event encoded alone and the features pooled (MELON Tab. 5, `events`)."""

from __future__ import annotations

import torch

from lit_retrieval.data.text.queries import QueryMode, concat_query
from lit_retrieval.models.encoders.base import VideoTextEncoder
from lit_retrieval.models.features import TextFeatures


def encode_multi_event(encoder: VideoTextEncoder, events: list[list[str]], mode: QueryMode) -> TextFeatures:
    """Text features of multi-event queries, one row per event list."""
    if mode == "concat":
        return encoder.encode_text([concat_query(e) for e in events])
    features = encoder.encode_text([d for e in events for d in e])
    return pool_event_features(features, [len(e) for e in events])


def query_token_counts(encoder: VideoTextEncoder, events: list[list[str]]) -> list[int]:
    """Each multi-event query's length in the encoder's tokens, as its `concat` text (MELON
    Sec. 4.2) before truncation: the length that decides whether `max_text_len` positions (77 for
    CLIP, 248 for Long-CLIP) hold every event. Counted on the joined text in both query modes, so
    a query has one length whichever way it is encoded."""
    return encoder.text_token_counts([concat_query(e) for e in events])


def pool_event_features(features: TextFeatures, counts: list[int]) -> TextFeatures:
    """Per-event features -> one query each: mean of the pooled vectors (MELON Tab. 5 "event
    pooling"); the valid word tokens of a query's events are concatenated in order."""
    pooled = torch.stack([chunk.mean(0) for chunk in features.pooled.split(counts)])
    rows = [tok[m] for tok, m in zip(features.tokens, features.mask)]
    grouped, start = [], 0
    for count in counts:
        grouped.append(torch.cat(rows[start : start + count]))
        start += count
    longest = max(len(g) for g in grouped)
    tokens = features.tokens.new_zeros(len(counts), longest, features.tokens.shape[-1])
    mask = torch.zeros(len(counts), longest, dtype=torch.bool, device=tokens.device)
    for i, group in enumerate(grouped):
        tokens[i, : len(group)] = group
        mask[i, : len(group)] = True
    return TextFeatures(pooled=pooled, tokens=tokens, mask=mask)
