"""SigLIP's pairwise sigmoid loss (arXiv:2303.15343, Eq. 1) against the equation worked by hand, a loop over
every pair, and open_clip's own `SigLipLoss` (the big_vision formulation: logits = t * x @ y.T + b, labels
2 * eye - 1, minus the summed log-sigmoid over the batch size)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from lit_retrieval.losses import PairwiseSigmoidLoss


def test_a_two_pair_batch_worked_by_hand():
    """s = [[0.5, -0.2], [0.1, 0.8]], t = exp(log 10) = 10, b = -10: t*s + b = [[-5, -12], [-9, -2]];
    z = [[1, -1], [-1, 1]]; -log sigmoid(a) = log(1 + e^-a) for a = -5, 12, 9, -2:
    5.006715348, 6.1442e-6, 1.23402e-4, 2.126928011; their sum over |B| = 2 is 3.566886453."""
    loss = PairwiseSigmoidLoss()  # b = -10, SigLIP's initialisation
    similarity = torch.tensor([[0.5, -0.2], [0.1, 0.8]])
    value = loss(similarity * math.exp(math.log(10.0)))
    assert value.item() == pytest.approx(3.566886453, abs=1e-6)


def test_every_pair_is_one_binary_term():
    """A loop over (i, j): -log sigmoid(z_ij (t x_i.y_j + b)), summed, divided by |B|."""
    generator = torch.Generator().manual_seed(0)
    text, video = (F.normalize(torch.randn(5, 8, generator=generator), dim=-1) for _ in range(2))
    scale, bias = 7.0, -3.5
    loss = PairwiseSigmoidLoss(bias_init=bias)
    total = 0.0
    for i in range(5):
        for j in range(5):
            z = 1.0 if i == j else -1.0
            total += math.log1p(math.exp(-z * (scale * float(text[i] @ video[j]) + bias)))
    assert loss(scale * text @ video.t()).item() == pytest.approx(total / 5, rel=1e-6)


def test_equals_open_clips_siglip_loss_in_value_and_gradient():
    loss_module = pytest.importorskip("open_clip.loss")
    generator = torch.Generator().manual_seed(1)
    text = F.normalize(torch.randn(6, 16, generator=generator), dim=-1).requires_grad_()
    video = F.normalize(torch.randn(6, 16, generator=generator), dim=-1).requires_grad_()
    logit_scale, logit_bias = torch.tensor(math.log(10.0), requires_grad=True), torch.tensor(-10.0)
    theirs = loss_module.SigLipLoss()(video, text, logit_scale.exp(), logit_bias.requires_grad_())
    theirs.backward()
    want = [text.grad.clone(), video.grad.clone(), logit_scale.grad.clone(), logit_bias.grad.clone()]
    for t in (text, video, logit_scale):
        t.grad = None
    ours_loss = PairwiseSigmoidLoss(bias_init=-10.0)
    ours = ours_loss(logit_scale.exp() * text @ video.t())
    ours.backward()
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    got = [text.grad, video.grad, logit_scale.grad, ours_loss.logit_bias.grad]
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_the_bias_is_learnable_unless_frozen_and_the_matrix_must_be_square():
    assert PairwiseSigmoidLoss().logit_bias.requires_grad
    assert not PairwiseSigmoidLoss(learn_bias=False).logit_bias.requires_grad
    with pytest.raises(ValueError, match="square"):
        PairwiseSigmoidLoss()(torch.zeros(2, 3))


def test_bf16_logits_score_in_float32():
    logits = torch.tensor([[5.0, -2.0], [1.0, 8.0]])
    full = PairwiseSigmoidLoss()(logits)
    half = PairwiseSigmoidLoss()(logits.bfloat16())
    assert half.dtype == torch.float32 and half.item() == pytest.approx(full.item(), rel=1e-6)
