"""SigLIP's pairwise sigmoid loss (Zhai et al., "Sigmoid Loss for Language Image Pre-Training", ICCV 2023,
arXiv:2303.15343, Eq. 1 and Algorithm 1):

    L = -1/|B| sum_i sum_j log sigmoid(z_ij (t x_i . y_j + b)),    z_ij = 1 if i == j else -1

over a batch of |B| pairs, with x_i, y_j the unit text and video features, t = exp(t') the learnable
temperature and b a learnable bias. Every pair is an independent binary classification, so the loss is
symmetric in its two sides and needs no softmax over a row or column.

Here t x_i . y_j comes from the head (`SimilarityHead.logits`: the score times `exp(logit_scale)`, so t' is
the head's `logit_scale`); the loss owns b (`logit_bias`). The paper initialises t' = log 10 and b = -10
(Sec. 3.2, beside Eq. 1), the defaults here; a SigLIP checkpoint's own trained values are the module's choice
(`modules/objectives.py`). Under cross-device negatives the matrix holds the global batch and |B| is its
size, which is the gradient of SigLIP's chunked implementation (each device its images against every
device's texts, divided by its own batch, then averaged over devices).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

PAPER_LOGIT_SCALE = math.log(10.0)  # t' (SigLIP Sec. 3.3)
PAPER_LOGIT_BIAS = -10.0  # b


class PairwiseSigmoidLoss(nn.Module):
    """SigLIP Eq. 1 for scaled logits `[B, B]` (text i vs video j, t x_i . y_j) with matching pairs on the
    diagonal; adds the learnable bias `logit_bias` (initialised at `bias_init`, trained unless
    `learn_bias` is False)."""

    def __init__(self, bias_init: float = PAPER_LOGIT_BIAS, learn_bias: bool = True) -> None:
        super().__init__()
        self.logit_bias = nn.Parameter(torch.tensor(float(bias_init)), requires_grad=learn_bias)

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        if logits.ndim != 2 or logits.shape[0] != logits.shape[1]:
            raise ValueError(f"expected a square [B, B] logit matrix, got {tuple(logits.shape)}")
        size = logits.shape[0]
        logits = logits.float()  # float32 under every precision, as cross-entropy runs under autocast
        signs = 2 * torch.eye(size, device=logits.device) - 1  # z_ij
        return -F.logsigmoid(signs * (logits + self.logit_bias.float())).sum() / size
