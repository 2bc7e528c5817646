"""MeVTR: K-medoid key-event frames, the multi-positive loss, and event-caption training
(Zhang et al., arXiv:2308.11551)."""

import pytest
import torch
import torch.nn.functional as F

from lit_retrieval.losses import MeVTRLoss, SymmetricInfoNCE
from lit_retrieval.models.features import VideoFeatures
from lit_retrieval.models.heads import MeanPHead, MeVTRHead
from lit_retrieval.models.heads.mevtr import kkz_kmedoids


def clustered_video(seed=0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(3, 8, generator=g) * 10
    labels = torch.tensor([0, 0, 1, 1, 1, 2, 2, 0, 0, 0])  # 10 frames, the last 2 padded
    frames = centres[labels] + 0.1 * torch.randn(10, 8, generator=g)
    mask = torch.ones(10, dtype=torch.bool)
    mask[8:] = False
    frames[8:] = 100.0  # padding far away: would be a medoid if it counted
    return frames, mask, labels


def test_medoids_are_valid_frames_in_order_and_locally_optimal():
    frames, mask, labels = clustered_video()
    index, valid = kkz_kmedoids(frames[None], mask[None], k=3)
    index, valid = index[0], valid[0]
    assert valid.all() and torch.equal(index, index.sort().values) and bool(mask[index].all())
    assert sorted(labels[index].tolist()) == [0, 1, 2]  # one key frame per event
    distance = torch.cdist(frames[:8], frames[:8])
    assignment = distance[:, index].argmin(1)
    for c, medoid in enumerate(index.tolist()):
        members = (assignment == c).nonzero().flatten()
        costs = distance[members][:, members].sum(1)
        assert distance[medoid, members].sum() == pytest.approx(costs.min().item())  # brute force over members


def test_few_valid_frames_use_all_of_them():
    frames, mask, _ = clustered_video()
    mask[3:] = False
    index, valid = kkz_kmedoids(frames[None], mask[None], k=5)
    assert index[0][valid[0]].tolist() == [0, 1, 2] and int(valid.sum()) == 3


def test_head_is_meanp_over_key_event_frames_and_ignores_padding():
    frames, mask, _ = clustered_video()
    head = MeVTRHead(num_events=3)
    assert head.indexable
    video = VideoFeatures(frames=frames[None], mask=mask[None])
    index, _ = kkz_kmedoids(frames[None], mask[None], 3)
    expected = MeanPHead().encode_video(
        VideoFeatures(frames=frames[index[0]][None], mask=torch.ones(1, 3, dtype=torch.bool))
    )
    assert torch.allclose(head.encode_video(video), expected, atol=1e-6)
    noisy = frames.clone()
    noisy[8:] = torch.randn(2, 8) * 50
    assert torch.allclose(head.encode_video(VideoFeatures(frames=noisy[None], mask=mask[None])), expected, atol=1e-6)
    frames.requires_grad_(True)
    head.encode_video(VideoFeatures(frames=frames[None], mask=mask[None])).sum().backward()
    assert set(frames.grad.abs().sum(1).nonzero().flatten().tolist()) == set(
        index[0].tolist()
    )  # gradients reach the key frames


def test_mevtr_loss_against_the_equations():
    logits = torch.tensor([[2.0, 0.1, -1.0], [1.5, 0.3, 0.2], [0.0, 1.0, 0.5], [0.4, 0.2, 2.2], [-0.3, 0.9, 1.1]])
    owner = torch.tensor([0, 0, 1, 2, 2])
    t2v = sum(-F.log_softmax(logits[i], 0)[owner[i]] for i in range(5)) / 5
    positives = {v: [i for i in range(5) if owner[i] == v] for v in range(3)}
    balanced = (
        sum(-sum(F.log_softmax(logits[:, v], 0)[i] for i in positives[v]) / len(positives[v]) for v in range(3)) / 3
    )

    def disjoint_term(i, v):
        negatives = [k for k in range(5) if owner[k] != v]
        return -(logits[i, v] - torch.logsumexp(torch.stack([logits[i, v], *[logits[k, v] for k in negatives]]), 0))

    disjoint = sum(sum(disjoint_term(i, v) for i in positives[v]) / len(positives[v]) for v in range(3)) / 3
    assert MeVTRLoss()(logits, owner).item() == pytest.approx((balanced + t2v).item())
    assert MeVTRLoss(v2t="disjoint", alpha=0.5)(logits, owner).item() == pytest.approx((disjoint + 0.5 * t2v).item())
    dynamic = MeVTRLoss(dynamic_alpha=True, alpha=1.0)
    first = dynamic(logits, owner)
    assert first.item() == pytest.approx((balanced + t2v).item())
    second = dynamic(logits * 2, owner)  # alpha = the previous step's L_v2t / L_t2v
    v2t_alone = MeVTRLoss(alpha=0.0)(logits * 2, owner)
    assert second.item() == pytest.approx(
        (v2t_alone + (balanced / t2v) * F.cross_entropy(logits * 2, owner)).item(), abs=1e-5
    )
    square = torch.randn(4, 4)
    assert MeVTRLoss()(square, torch.arange(4)).item() == pytest.approx(SymmetricInfoNCE()(square).item(), abs=1e-6)
    with pytest.raises(ValueError, match="at least one caption"):
        MeVTRLoss()(logits[:2], owner[:2])


def test_event_caption_training_and_exclusive_with_mea(tmp_path, corpus, tiny_clip):
    import lightning as L

    from lit_retrieval.data import MultiEventDataModule
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.modules import DualEncoderRetrieval, MEAConfig

    with pytest.raises(ValueError, match="exclusive"):
        DualEncoderRetrieval(
            CLIPEncoder(pretrained=str(tiny_clip)), MeVTRHead(), mea=MEAConfig(), event_loss=MeVTRLoss()
        )
    torch.manual_seed(0)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)),
        MeVTRHead(num_events=2),
        query_mode="events",
        event_loss=MeVTRLoss(dynamic_alpha=True),
    )
    data = MultiEventDataModule(annotation=str(corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=8)
    data.setup()
    batch = next(iter(data.train_dataloader()))
    calls = []
    encode = module.encoder.encode_text
    module.encoder.encode_text = lambda texts: calls.append(list(texts)) or encode(texts)
    out = module.training_step(batch, 0)
    assert calls == [[d for e in batch["events"] for d in e]] and torch.isfinite(out["loss"])
    module.encoder.encode_text = encode
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, data)
    trainer.test(module, data, verbose=False)
    assert (
        "objectives.event_loss.loss.prev_ratio" in module.state_dict() and module.eval_results["test"]["t2v/R@1"] >= 0
    )
