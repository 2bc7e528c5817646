"""Text towers: CLIP's own (EOT pooling) and any Hugging Face `AutoModel` (e.g. all-MiniLM-L6-v2)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn
from transformers import AutoModel, AutoTokenizer, PreTrainedTokenizerBase

from lit_retrieval.models.features import TextFeatures
from lit_retrieval.shipped import resolve_model_path


def last_attended(mask: torch.Tensor) -> torch.Tensor:
    """Index of the last position with `mask == 1` in each row (right or left padding)."""
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), positions, -1).amax(dim=1)


class CLIPTextTower(nn.Module):
    """CLIP's causal text transformer; the sentence feature is the projected EOT token, found as
    the last attended position (CLIP tokenisation ends every sequence with EOT), so it does not
    depend on the EOT id having the largest id (the argmax rule of OpenAI CLIP's `encode_text`)."""

    def __init__(
        self, text_model: nn.Module, projection: nn.Linear, tokenizer: PreTrainedTokenizerBase, max_len: int
    ) -> None:
        super().__init__()
        self.text_model = text_model
        self.projection = projection
        self.tokenizer = tokenizer
        self.max_len = max_len

    def forward(self, texts: list[str]) -> TextFeatures:
        device = self.projection.weight.device
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt").to(
            device
        )
        hidden = self.text_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        tokens = self.projection(hidden)
        mask = batch["attention_mask"].bool()
        pooled = tokens[torch.arange(len(texts), device=device), last_attended(mask)]
        return TextFeatures(pooled=pooled, tokens=tokens, mask=mask)


class AutoTextTower(nn.Module):
    """Any `AutoModel` encoder as the text tower, with a new linear projection to the joint width.

    `pooling="mean"` (masked mean of token states, as sentence-transformers models such as
    all-MiniLM-L6-v2 were trained) or `"cls"` (first token). With `cache_size > 0`, the hidden
    states of up to that many texts are kept while the backbone is frozen and in eval mode (its
    output is then a pure function of the text), so repeated queries skip the backbone. A text
    missing from the cache is encoded alone (no padding, batch of one), so its cached state is the
    same bits whatever batch it was first met in: a run resumed with an empty cache meets its texts
    in other batches and still trains on the uninterrupted run's values (a state computed padded
    beside a longer text differs in the last bits, about 1e-6). Filling costs one backbone call per
    new text, once.
    """

    def __init__(
        self,
        path: str,
        embed_dim: int,
        max_len: int = 256,
        pooling: Literal["mean", "cls"] = "mean",
        cache_size: int = 0,
    ) -> None:
        super().__init__()
        path = resolve_model_path(path)
        self.model = AutoModel.from_pretrained(path).train()  # from_pretrained returns eval mode
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.projection = nn.Linear(self.model.config.hidden_size, embed_dim)
        limit = getattr(self.model.config, "max_position_embeddings", max_len)
        self.max_len = min(max_len, limit)
        self.pooling = pooling
        self.cache_size = cache_size
        self._cache: dict[str, torch.Tensor] = {}

    def _cacheable(self) -> bool:
        return (
            self.cache_size > 0
            and not self.model.training
            and not any(p.requires_grad for p in self.model.parameters())
        )

    def _hidden(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        device = self.projection.weight.device
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_len, return_tensors="pt").to(
            device
        )
        hidden = self.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        return hidden, batch["attention_mask"].bool()

    def _hidden_cached(self, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        with torch.no_grad():  # one text per call: see the class docstring
            fresh = {text: self._hidden([text])[0][0] for text in missing}
        for text in missing[: max(0, self.cache_size - len(self._cache))]:
            self._cache[text] = fresh[text]
        rows = [self._cache.get(t, fresh.get(t)) for t in texts]
        mask = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.bool, device=rows[0].device)
        hidden = rows[0].new_zeros(len(rows), mask.shape[1], rows[0].shape[-1])
        for i, row in enumerate(rows):
            hidden[i, : len(row)] = row
            mask[i, : len(row)] = True
        return hidden, mask

    def forward(self, texts: list[str]) -> TextFeatures:
        hidden, mask = self._hidden_cached(texts) if self._cacheable() else self._hidden(texts)
        if self.pooling == "cls":
            pooled_hidden = hidden[:, 0]
        else:
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled_hidden = (hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        return TextFeatures(pooled=self.projection(pooled_hidden), tokens=self.projection(hidden), mask=mask)
