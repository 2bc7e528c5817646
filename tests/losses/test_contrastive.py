"""GVE Eq. 1 against a hand computation, and cross-device negatives on 2 gloo processes against
one process holding the whole batch (GVE's loss; the dual encoder's InfoNCE or sigmoid loss with MEA)."""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F

from lit_retrieval.losses.contrastive import MultimodalInfoNCE
from helpers.forked_ranks import run_ranks


def hand_loss(q, t, n, tau, shared=False, keys=None):
    """Eq. 1 with explicit loops: q->y over positives (minus same-key ones) + hard negatives; y->q over queries."""
    q, t = F.normalize(q, dim=-1), F.normalize(t, dim=-1)
    n = F.normalize(n, dim=-1) if n is not None else None
    size = len(q)
    total_qy = total_yq = 0.0
    for i in range(size):
        terms = []
        for j in range(size):
            if j != i and keys is not None and keys[i] == keys[j]:
                continue
            terms.append(float(q[i] @ t[j]) / tau)
        if n is not None:
            pool = n.reshape(-1, n.shape[-1]) if shared else n[i]
            terms += [float(q[i] @ v) / tau for v in pool]
        total_qy += -float(q[i] @ t[i]) / tau + math.log(sum(math.exp(x) for x in terms))
        back = [float(t[i] @ q[j]) / tau for j in range(size) if j == i or keys is None or keys[i] != keys[j]]
        total_yq += -float(t[i] @ q[i]) / tau + math.log(sum(math.exp(x) for x in back))
    return (total_qy / size + total_yq / size) / 2


@pytest.mark.parametrize("shared", [False, True])
def test_loss_matches_equation_one_with_hard_negatives(shared):
    g = torch.Generator().manual_seed(0)
    q, t, n = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g), torch.randn(4, 3, 8, generator=g)
    loss = MultimodalInfoNCE(0.05, "shared" if shared else "own", cross_device=False)
    out = loss(q, t, n)
    assert out["loss_value"].item() == pytest.approx(hand_loss(q, t, n, 0.05, shared), rel=1e-5)
    assert out["loss"].item() == pytest.approx(out["loss_value"].item())  # one process: no scaling


def test_same_target_pairs_are_not_negatives_and_stats_are_cosines():
    g = torch.Generator().manual_seed(1)
    q, t = torch.randn(5, 6, generator=g), torch.randn(5, 6, generator=g)
    t[3] = t[1]  # two captions of one video
    keys = torch.tensor([10, 11, 12, 11, 13])
    out = MultimodalInfoNCE(0.03, cross_device=False)(q, t, None, keys)
    assert out["loss_value"].item() == pytest.approx(hand_loss(q, t, None, 0.03, keys=keys.tolist()), rel=1e-5)
    cos = F.normalize(q, dim=-1) @ F.normalize(t, dim=-1).t()
    assert out["positive"].item() == pytest.approx(cos.diagonal().mean().item(), abs=1e-6)
    masked = cos.clone()
    masked[1, 3] = masked[3, 1] = float("nan")
    assert out["mean_score"].item() == pytest.approx(masked[~masked.isnan()].mean().item(), abs=1e-6)
    off = cos.clone().fill_diagonal_(float("-inf"))
    off[1, 3] = off[3, 1] = float("-inf")
    assert out["margin"].item() == pytest.approx((cos.diagonal() - off.amax(1)).mean().item(), abs=1e-6)


def test_loss_gradient_flows_to_queries_targets_and_negatives():
    q, t = torch.randn(3, 4, requires_grad=True), torch.randn(3, 4, requires_grad=True)
    n = torch.randn(3, 2, 4, requires_grad=True)
    MultimodalInfoNCE(cross_device=False)(q, t, n)["loss"].backward()
    assert all(x.grad is not None and x.grad.abs().sum() > 0 for x in (q, t, n))


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(8, 6, generator=g),
        torch.randn(8, 6, generator=g),
        torch.randn(8, 2, 6, generator=g),
        torch.randint(0, 5, (8,), generator=g),
    )


def _encoder(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(6, 5)


def _run(model, xq, xt, xn, keys, hard):
    loss_fn = MultimodalInfoNCE(0.1, hard)
    out = loss_fn(model(xq), model(xt), model(xn), keys)
    out["loss"].backward()
    return out["loss_value"].item()


def _worker(rank: int, world: int, init: str, out_dir: str, hard: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    xq, xt, xn, keys = _batch()
    share = slice(rank * 4, (rank + 1) * 4)
    model = _encoder()
    value = _run(model, xq[share], xt[share], xn[share], keys[share], hard)
    for param in model.parameters():  # what DDP does: average gradients over ranks
        dist.all_reduce(param.grad)
        param.grad /= world
    torch.save({"loss": value, "grads": [p.grad for p in model.parameters()]}, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.parametrize("hard", ["own", "shared"])
def test_cross_device_negatives_give_the_full_batch_gradient(tmp_path, hard):
    init = f"file://{tmp_path / 'rendezvous'}"
    run_ranks(_worker, (2, init, str(tmp_path), hard))
    model = _encoder()
    full = _run(model, *_batch(), hard)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert result["loss"] == pytest.approx(full, rel=1e-6)
        for got, want in zip(result["grads"], (p.grad for p in model.parameters())):
            torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


def _dual_encoder(tiny_clip: str, loss: str):
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.models.heads import MeanPHead
    from lit_retrieval.modules import DualEncoderRetrieval, MEAConfig
    from lit_retrieval.modules.objectives import ContrastiveConfig

    torch.manual_seed(0)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=tiny_clip),
        MeanPHead(),
        mea=MEAConfig(weight=0.5, num_partial=2),
        cross_device=True,
        contrastive=ContrastiveConfig(loss=loss),
    )
    from lit_retrieval.data.text.queries import PartialBatch

    def first_events(events, *stream):  # the same partial queries however the batch is split
        owner = [i for i, e in enumerate(events) for _ in range(2)]
        return PartialBatch(
            events=[e[: k + 1] for e in events for k in range(2)],
            owner=owner,
            slot=[k for _ in events for k in range(2)],
            num_slots=2,
        )

    module.objectives.mea.partial_queries = first_events
    return module


def _video_batch(rows):
    g = torch.Generator().manual_seed(5)
    frames = torch.randn(8, 3, 3, 32, 32, generator=g)
    events = [[f"a shape number {i} moves", f"then it turns {i}", f"and stops {i}"] for i in range(8)]
    return {
        "frames": frames[rows],
        "frame_mask": torch.ones(len(rows), 3, dtype=torch.bool),
        "events": [events[i] for i in rows],
        "video_id": [f"v{i}" for i in rows],
        "skipped": [],
    }


def _dual_worker(rank: int, world: int, init: str, out_dir: str, tiny_clip: str, loss: str) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    module = _dual_encoder(tiny_clip, loss)
    out = module.training_step(_video_batch(list(range(rank * 4, rank * 4 + 4))), 0)
    out["loss"].backward()
    grads = []
    for param in module.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            grads.append(param.grad / world)
    torch.save(
        {"loss": out["loss_value"].item(), "theta": out["mea_theta"].item(), "grads": grads},
        os.path.join(out_dir, f"dual{rank}.pt"),
    )
    dist.destroy_process_group()


@pytest.mark.distributed
@pytest.mark.parametrize("loss", ["infonce", "sigmoid"])
def test_dual_encoder_cross_device_contrastive_and_mea_match_one_process(tmp_path, tiny_clip, loss):
    """InfoNCE or SigLIP's sigmoid loss (its bias's gradient too) with MEA over 2 ranks' global batch."""
    init = f"file://{tmp_path / 'rendezvous'}"
    run_ranks(_dual_worker, (2, init, str(tmp_path), str(tiny_clip), loss))
    module = _dual_encoder(str(tiny_clip), loss)
    out = module.training_step(_video_batch(list(range(8))), 0)
    out["loss"].backward()
    want = [p.grad for p in module.parameters() if p.grad is not None]
    for rank in range(2):
        got = torch.load(tmp_path / f"dual{rank}.pt")
        assert got["loss"] == pytest.approx(out["loss_value"].item(), rel=1e-5)
        assert got["theta"] == pytest.approx(out["mea_theta"].item(), rel=1e-5)  # delta, xi over the global batch
        assert len(got["grads"]) == len(want)
        for a, b in zip(got["grads"], want):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
