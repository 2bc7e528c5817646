"""Checks every similarity head must pass, shared by the head test modules."""

import torch

from lit_retrieval.losses import SymmetricInfoNCE
from lit_retrieval.models.features import TextFeatures, VideoFeatures


def features(num_text=3, num_video=4, frames=6, words=5, dim=64, seed=0, patches=5):
    """Random text and video features with padded words and frames (videos of 6, 3, 1, 4 valid
    frames; texts of 5, 3, 4, 2 words), patch tokens included."""
    g = torch.Generator().manual_seed(seed)
    frame_mask = torch.zeros(num_video, frames, dtype=torch.bool)
    for v, n in enumerate([6, 3, 1, 4][:num_video]):
        frame_mask[v, :n] = True
    frame_values = torch.randn(num_video, frames, dim, generator=g) * frame_mask[..., None]
    word_mask = torch.zeros(num_text, words, dtype=torch.bool)
    for t, n in enumerate([5, 3, 4, 2][:num_text]):
        word_mask[t, :n] = True
    text = TextFeatures(
        pooled=torch.randn(num_text, dim, generator=g),
        tokens=torch.randn(num_text, words, dim, generator=g),
        mask=word_mask,
    )
    patch_values = torch.randn(num_video, frames, patches, dim, generator=g) * frame_mask[..., None, None]
    return text, VideoFeatures(frames=frame_values, mask=frame_mask, patches=patch_values)


def bind_seeded(make_head, encoder):
    """A head from `make_head()` built under seed 0 and bound to `encoder`."""
    torch.manual_seed(0)
    head = make_head()
    head.bind(encoder)
    return head


def assert_gradients_reach_every_parameter_and_steps_lower_the_loss(head, text, video, steps=20, repeats=3):
    """One backward reaches every trainable parameter; `steps` Adam steps on the batch cut the
    InfoNCE loss (averaged over `repeats` forwards, for stochastic heads) by 30%."""
    head.train()
    loss_fn = SymmetricInfoNCE()

    def loss():
        text_rep, video_rep = head.encode_text(text), head.encode_video(video)
        similarity = head.score(text_rep, video_rep)
        return loss_fn(head.logits(similarity)) + sum(head.auxiliary_losses(text_rep, video_rep, similarity).values())

    loss().backward()
    for name, param in head.named_parameters():
        if param.requires_grad:
            assert param.grad is not None and param.grad.abs().sum() > 0, name
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=1e-3)
    torch.manual_seed(0)
    before = sum(loss().item() for _ in range(repeats)) / repeats
    for _ in range(steps):
        optimizer.zero_grad()
        loss().backward()
        optimizer.step()
    assert sum(loss().item() for _ in range(repeats)) / repeats < 0.7 * before


def assert_trains_with_mea_evaluates_in_blocks_and_reloads(make_head, corpus, tiny_clip):
    """One epoch of `DualEncoderRetrieval` with MEA, a test in 1 MB scoring blocks, and a reload
    from the state dict that scores the same."""
    import lightning as L

    from lit_retrieval.data import MultiEventDataModule
    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.modules import DualEncoderRetrieval, EvaluationConfig, MEAConfig

    def build():
        torch.manual_seed(0)
        return DualEncoderRetrieval(
            CLIPEncoder(pretrained=str(tiny_clip)),
            make_head(),
            mea=MEAConfig(weight=0.5),
            evaluation=EvaluationConfig(memory_mb=1),
        )

    module = build()
    data = MultiEventDataModule(annotation=str(corpus / "annotations.json"), num_frames=4, image_size=32, batch_size=8)
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, data)
    trainer.test(module, data, verbose=False)
    assert 0 <= module.eval_results["test"]["t2v/R@1"] <= 100
    reloaded = build()
    reloaded.load_state_dict(module.state_dict())
    batch = next(iter(data.test_dataloader()))
    module.eval(), reloaded.eval()
    with torch.no_grad():
        a, b = module(batch), reloaded(batch)
        assert torch.allclose(module.head.score(*a), reloaded.head.score(*b))
