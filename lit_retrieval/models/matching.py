"""SALI's matching operators on text-to-shot similarities (SALI Sec. 3, "Matching operators").

`M` holds, for every text-video pair, the cosine similarities of the R = 3 projected text
embeddings (full query, subject span, object span) with the S projected shot embeddings:
`M [..., R, S]`, with `mask [..., S]` marking real (not padded) shots. Every function is batched
over the leading dimensions and differentiable.

- `greedy_max`: s_max = (1/R) sum_e max_k M_ek.
- `ot_match`: the capacity-constrained entropic OT of Sec. 3: plan T >= 0 with row sums 1/R and
  column sums <= c, computed by log-domain Sinkhorn (Chizat et al. 2018, the row step an
  equality projection, the column step the inequality projection `g = min(0, ...)`); score
  s_OT = <T, M>. It is `ot.partial.entropic_partial_wasserstein(a, b, -M, eps, m=1)` of POT
  (tests/models/test_matching.py compares the plans), hand-written because POT's partial solver is
  not batched over pairs and not cheaply differentiable.
- `film_grammar_penalty`: our reading of SALI's shot/reverse-shot penalty (the equation is missing
  from the paper text); see its docstring.

Rules we chose where the paper is silent (all documented in docs/sali.md):
- Too few shots for the capacity (S_valid * c < 1, e.g. a one-shot clip): the capacity of that
  video is raised to 1 / S_valid, the smallest value that can hold the rows' total mass, so a
  one-shot video puts all mass on its shot and OT equals greedy max there.
- Which constraint is exact after a few sweeps (`finish`): by default the iteration ends on the
  column step, so column sums <= c hold exactly (the paper's point: the three embeddings cannot
  all sit on one shot) and the row sums approach 1/R; a video whose evidence crowds one shot
  beyond c then scores lower. `finish="rows"` adds a last row step instead: rows are exactly
  1/R (the score is a weighted mean of M) and the columns approach c. Both agree at the fixed
  point, which five sweeps reach when c = 0.89 rarely binds; a strongly
  binding c (e.g. 0.4 at eps = 0.05) needs tens of sweeps.
- A pair whose video has no valid shot scores 0 under both operators.
"""

from __future__ import annotations

from typing import Literal

import torch

# A large finite negative: padded shots get no mass, and logsumexp keeps finite gradients.
_MASKED = -1e4


def _as_tensor(value: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return value.to(like) if isinstance(value, torch.Tensor) else like.new_tensor(float(value))


def greedy_max(M: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_max = mean over the R rows of each row's max over the valid shots; `[...]`."""
    masked = M.masked_fill(~mask.unsqueeze(-2), float("-inf"))
    best = masked.amax(-1)
    return torch.where(mask.any(-1, keepdim=True), best, torch.zeros_like(best)).mean(-1)


def soft_assignment(M: torch.Tensor, mask: torch.Tensor, eps: float | torch.Tensor) -> torch.Tensor:
    """Each row's softmax over the valid shots at temperature `eps` `[..., R, S]`: the smooth
    stand-in of greedy max's argmax that the film-grammar penalty differentiates through."""
    eps = _as_tensor(eps, M)
    logits = M.masked_fill(~mask.unsqueeze(-2), _MASKED) / eps
    return torch.softmax(logits, -1) * mask.unsqueeze(-2)


def ot_match(
    M: torch.Tensor,
    mask: torch.Tensor,
    capacity: float | torch.Tensor,
    eps: float | torch.Tensor,
    iters: int = 5,
    finish: Literal["columns", "rows"] = "columns",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Capacity-constrained entropic OT (SALI Sec. 3): `(score [...], plan [..., R, S])`.

    Rows carry mass 1/R each, columns receive at most `capacity` (raised per video to 1/S_valid
    when that is larger, see the module notes), `eps` is the entropic temperature and `iters`
    the number of (row, column) Sinkhorn sweeps; `finish` says which constraint a few sweeps
    leave exact (see the module notes). Computed in float32 or float64 (the input's if wider).
    """
    if iters < 1:
        raise ValueError(f"iters must be >= 1, got {iters}")
    if finish not in ("columns", "rows"):
        raise ValueError(f"finish must be 'columns' or 'rows', got {finish!r}")
    dtype = M.dtype
    M = M.double() if M.dtype == torch.float64 else M.float()
    eps = _as_tensor(eps, M)
    rows = M.shape[-2]
    valid = mask.unsqueeze(-2)
    sim = M.masked_fill(~valid, _MASKED)
    n_valid = mask.sum(-1, keepdim=True).clamp_min(1).to(M.dtype)
    cap = torch.maximum(_as_tensor(capacity, M).expand_as(n_valid), 1.0 / n_valid)
    log_row = eps * torch.log(M.new_tensor(1.0 / rows))
    log_col = eps * cap.log()  # [..., 1], broadcast over shots
    g = torch.zeros_like(M[..., 0, :])
    for _ in range(iters):
        f = log_row - eps * torch.logsumexp((sim + g.unsqueeze(-2)) / eps, dim=-1)
        g = log_col - eps * torch.logsumexp((sim + f.unsqueeze(-1)) / eps, dim=-2)
        g = g.clamp(max=0.0).masked_fill(~mask, 0.0)
    if finish == "rows":
        f = log_row - eps * torch.logsumexp((sim + g.unsqueeze(-2)) / eps, dim=-1)
    plan = torch.exp((sim + f.unsqueeze(-1) + g.unsqueeze(-2)) / eps) * valid
    score = (plan * M).sum((-2, -1))
    return score.to(dtype), plan.to(dtype)


def film_grammar_penalty(
    subject: torch.Tensor, obj: torch.Tensor, mask: torch.Tensor, window: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Shot/reverse-shot penalty terms of one subject and one object assignment `[..., S]`.

    Our reading of SALI's film-grammar penalty (its equation is not in the paper text): an
    interaction between two people is filmed as shot and reverse shot, so the subject's and the
    object's evidence should lie in *different*, *nearby* shots. With a, b the subject and object
    rows normalised to distributions over the video's shots (in temporal order):

    - same-shot term  P1 = sum_k a_k b_k: the chance both land on one shot;
    - distance term   P2 = sum_kl a_k b_l d(k, l), d = clamp((|k - l| - 1) / window, 0, 1):
      adjacent shots cost nothing, shots `window + 1` or more apart cost 1.

    Both lie in [0, 1]; the head subtracts softplus(w1) P1 + softplus(w2) P2 from the shot score
    of relational queries. Returns `(P1, P2)`, each `[...]`.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    weights = mask.to(subject.dtype)
    a = subject * weights
    b = obj * weights
    a = a / a.sum(-1, keepdim=True).clamp_min(1e-12)
    b = b / b.sum(-1, keepdim=True).clamp_min(1e-12)
    same = (a * b).sum(-1)
    positions = torch.arange(mask.shape[-1], device=mask.device, dtype=subject.dtype)
    gap = (positions[:, None] - positions[None, :]).abs()
    distance = ((gap - 1) / window).clamp(0.0, 1.0)
    far = torch.einsum("...k,kl,...l->...", a, distance, b)
    return same, far
