import pytest
import torch

from lit_retrieval.losses import MEALoss

# text i vs video j; video 0: positive 0.9, hardest negative text 0.5 (row 1)
SIM = torch.tensor([[0.9, 0.1, 0.2], [0.5, 0.8, 0.3], [0.2, 0.4, 0.7]])
PARTIAL = torch.tensor([[0.68, 0.95], [0.5, 0.62], [0.1, 0.65]])  # no hinge exactly at 0


def reference(sim, partial, theta):
    b, l = partial.shape
    push = sum(max(0.0, partial[i, k] - sim[i, i] + theta) for i in range(b) for k in range(l)) / (b * l)
    hard = [max(sim[j, i] for j in range(b) if j != i) for i in range(b)]
    pull = sum(max(0.0, hard[i] - partial[i, k]) for i in range(b) for k in range(l)) / (b * l)
    delta = sum(sim[i, i] - partial[i, k] for i in range(b) for k in range(l)) / (b * l)
    xi = sum(max(0.0, sim[i, i] - hard[i]) for i in range(b)) / (2 * b)
    return float(push), float(pull), float(delta), float(xi)


def test_equations_on_a_hand_made_batch():
    mea = MEALoss()
    s, p = SIM.double(), PARTIAL.double()
    _, _, delta, xi = reference(s, p, 0.0)
    first = mea(s, p)  # first step: its own statistics
    assert first.delta.item() == pytest.approx(delta) and first.xi.item() == pytest.approx(xi)
    assert first.theta.item() == pytest.approx(min(delta, xi))
    push, pull, _, _ = reference(s, p, min(delta, xi))
    assert first.push.item() == pytest.approx(push) and first.pull.item() == pytest.approx(pull)
    assert first.loss.item() == pytest.approx(push + pull)


def test_threshold_comes_from_the_previous_step_and_switches():
    mea = MEALoss()
    mea(SIM, PARTIAL)
    _, _, delta, xi = reference(SIM.double(), PARTIAL.double(), 0.0)
    second = mea(SIM * 0.5, PARTIAL * 0.5)
    assert second.delta.item() == pytest.approx(delta) and second.xi.item() == pytest.approx(xi)
    no_xi = MEALoss(use_xi=False)
    no_xi(SIM, PARTIAL)
    assert no_xi(SIM, PARTIAL).theta.item() == pytest.approx(delta)
    assert MEALoss(use_pull=False)(SIM, PARTIAL).pull.item() == 0.0


def test_gradients_only_where_hinges_are_active():
    sim = SIM.clone().requires_grad_(True)
    partial = PARTIAL.clone().requires_grad_(True)
    out = MEALoss()(sim, partial)
    out.loss.backward()
    theta = out.theta.item()
    for i in range(3):
        for k in range(2):
            push_active = PARTIAL[i, k] - SIM[i, i] + theta > 0
            hard = max(SIM[j, i] for j in range(3) if j != i)
            pull_active = hard - PARTIAL[i, k] > 0
            expected = (float(push_active) - float(pull_active)) / 6
            assert partial.grad[i, k].item() == pytest.approx(expected)
    assert sim.grad[0, 2].item() == 0.0  # never the hardest negative of video 2, not a positive


def test_state_round_trips_through_a_state_dict():
    mea = MEALoss()
    mea(SIM, PARTIAL)
    restored = MEALoss()
    restored.load_state_dict(mea.state_dict())
    a, b = mea(SIM * 0.3, PARTIAL * 0.3), restored(SIM * 0.3, PARTIAL * 0.3)
    assert a.theta.item() == b.theta.item() and a.loss.item() == b.loss.item()


def test_eval_mode_does_not_move_the_threshold():
    mea = MEALoss()
    mea(SIM, PARTIAL)
    before = mea.prev_delta.clone()
    mea.eval()
    mea(SIM * 0.1, PARTIAL * 0.1)
    assert torch.equal(mea.prev_delta, before)


def test_masked_slots_are_left_out_of_every_mean():
    sim = SIM.double()
    wide = torch.cat([PARTIAL.double(), torch.full((3, 1), 5.0, dtype=torch.double)], 1)  # junk in slot 2
    mask = torch.tensor([[True, True, False]] * 3)
    masked = MEALoss()(sim, wide, mask)
    plain = MEALoss()(sim, PARTIAL.double())
    for key in ("loss", "push", "pull", "theta", "delta", "xi"):
        assert getattr(masked, key).item() == pytest.approx(getattr(plain, key).item())


def test_a_step_without_partial_queries_keeps_the_state():
    mea = MEALoss()
    mea(SIM, PARTIAL)
    before = (mea.prev_delta.clone(), mea.prev_xi.clone())
    out = mea(SIM, PARTIAL, torch.zeros_like(PARTIAL, dtype=torch.bool))
    assert out.loss.item() == 0.0 and torch.equal(mea.prev_delta, before[0]) and torch.equal(mea.prev_xi, before[1])
