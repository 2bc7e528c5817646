"""SALI's matching operators and film-grammar penalty against hand-made matrices and POT."""

import numpy as np
import ot
import pytest
import torch

from lit_retrieval.models.matching import film_grammar_penalty, greedy_max, ot_match, soft_assignment


def test_greedy_max_is_the_mean_of_row_maxima_over_valid_shots():
    M = torch.tensor([[0.1, 0.9, 0.95], [0.5, 0.2, 0.99], [0.3, 0.4, 0.98]])
    mask = torch.tensor([True, True, False])  # the third shot is padding
    assert greedy_max(M, mask).item() == pytest.approx((0.9 + 0.5 + 0.4) / 3)
    assert greedy_max(M, torch.zeros(3, dtype=torch.bool)).item() == 0.0


def _random_problem(seed: int, shots: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).uniform(-0.2, 0.8, (3, shots)))


@pytest.mark.parametrize("shots,capacity", [(6, 0.3), (12, 0.5), (5, 0.89), (4, 0.4)])
def test_ot_plan_equals_pot_entropic_partial_wasserstein(shots, capacity):
    M = _random_problem(shots, shots)
    a = np.full(3, 1 / 3)
    reference = ot.partial.entropic_partial_wasserstein(
        a, np.full(shots, capacity), -M.numpy(), 0.05, m=a.sum(), numItermax=5000, stopThr=1e-14
    )
    score, plan = ot_match(M[None], torch.ones(1, shots, dtype=torch.bool), capacity, 0.05, iters=300)
    np.testing.assert_allclose(plan[0].numpy(), reference, atol=1e-6)
    assert score.item() == pytest.approx(float((reference * M.numpy()).sum()), abs=1e-6)


def test_ot_constraints_rows_one_third_columns_capped_and_padding_empty():
    M = torch.tensor([[0.9, 0.1, 0.2, 0.7, 0.99], [0.8, 0.0, 0.3, 0.6, 0.99], [0.85, 0.2, 0.1, 0.5, 0.99]])
    mask = torch.tensor([True, True, True, True, False])
    capacity = 0.4  # binds: every row prefers shot 0
    _, plan = ot_match(M, mask, capacity, 0.05, iters=200)
    np.testing.assert_allclose(plan.sum(-1).numpy(), [1 / 3] * 3, atol=1e-5)
    assert (plan.sum(-2) <= capacity + 1e-6).all()
    assert plan[:, 0].sum().item() == pytest.approx(capacity, abs=1e-4)
    assert plan[:, 4].abs().max().item() == 0.0
    # five sweeps (SALI's setting) against a strongly binding cap: `finish` picks the exact side
    _, plan5 = ot_match(M, mask, capacity, 0.05, iters=5)
    assert (plan5.sum(-2) <= capacity + 1e-6).all() and (plan5.sum(-1) < 1 / 3).all()
    _, plan5 = ot_match(M, mask, capacity, 0.05, iters=5, finish="rows")
    np.testing.assert_allclose(plan5.sum(-1).numpy(), [1 / 3] * 3, atol=1e-6)
    assert plan5.sum(-2).max() > capacity


def test_ot_tends_to_greedy_max_as_capacity_to_one_and_eps_to_zero():
    M = _random_problem(3, 9).float()
    mask = torch.ones(9, dtype=torch.bool)
    gaps = [
        abs(ot_match(M, mask, 0.999, eps, iters=50)[0].item() - greedy_max(M, mask).item())
        for eps in (0.1, 0.02, 0.002)
    ]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-3


def test_too_few_shots_raise_the_capacity_to_hold_the_mass():
    M = torch.tensor([[0.3], [0.6], [0.9]])
    score, plan = ot_match(M, torch.tensor([True]), 0.89, 0.07)
    np.testing.assert_allclose(plan.sum(-1).numpy(), [1 / 3] * 3, atol=1e-6)
    assert score.item() == pytest.approx(greedy_max(M, torch.tensor([True])).item(), abs=1e-6)
    two = torch.tensor([[0.9, 0.1], [0.8, 0.2], [0.7, 0.3]])
    _, plan = ot_match(two, torch.ones(2, dtype=torch.bool), 0.2, 0.05, iters=100)  # 2 x 0.2 < 1: c -> 0.5
    np.testing.assert_allclose(plan.sum(-1).numpy(), [1 / 3] * 3, atol=1e-5)
    assert (plan.sum(-2) <= 0.5 + 1e-6).all()


def test_ot_is_batched_and_differentiable_in_similarities_capacity_and_eps():
    M = torch.randn(4, 5, 3, 7, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(4, 5, 7) > 0.3
    mask[..., 0] = True
    capacity = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    eps = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    score, plan = ot_match(M, mask, capacity, eps)
    assert score.shape == (4, 5) and plan.shape == (4, 5, 3, 7)
    single, _ = ot_match(M[2, 3], mask[2, 3], capacity, eps)
    assert single.item() == pytest.approx(score[2, 3].item(), abs=1e-12)
    score.sum().backward()
    for tensor in (M, capacity, eps):
        assert tensor.grad is not None and torch.isfinite(tensor.grad).all()
    assert M.grad[~mask.unsqueeze(-2).expand_as(M)].abs().max() == 0  # padded shots get no gradient
    assert torch.autograd.gradcheck(
        lambda m, c, e: ot_match(m, mask[0, 0], c, e)[0], (M[0, 0].detach().requires_grad_(), capacity, eps)
    )


def test_soft_assignment_is_a_distribution_over_valid_shots():
    M = torch.tensor([[0.1, 0.9, 0.5]]).expand(3, 3)
    mask = torch.tensor([True, True, False])
    a = soft_assignment(M, mask, 0.01)
    np.testing.assert_allclose(a.sum(-1).numpy(), 1.0, atol=1e-6)
    assert a[0, 1].item() == pytest.approx(1.0, abs=1e-6) and a[0, 2].item() == 0.0


def test_film_grammar_penalty_prefers_different_nearby_shots():
    mask = torch.ones(6, dtype=torch.bool)
    one_hot = torch.eye(6)
    same, far = film_grammar_penalty(one_hot[2], one_hot[2], mask)
    assert (same.item(), far.item()) == (1.0, 0.0)
    same, far = film_grammar_penalty(one_hot[2], one_hot[3], mask)  # shot / reverse shot
    assert (same.item(), far.item()) == (0.0, 0.0)
    same, far = film_grammar_penalty(one_hot[0], one_hot[5], mask, window=2)
    assert (same.item(), far.item()) == (0.0, 1.0)
    _, far = film_grammar_penalty(one_hot[0], one_hot[2], mask, window=2)
    assert far.item() == pytest.approx(0.5)
    spread = torch.full((6,), 1 / 6)
    same, far = film_grammar_penalty(spread, spread, mask)
    assert same.item() == pytest.approx(1 / 6)
    brute = sum(min(max(abs(k - l) - 1, 0) / 2, 1.0) for k in range(6) for l in range(6)) / 36
    assert far.item() == pytest.approx(brute)
