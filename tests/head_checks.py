"""Checks every similarity head must pass, shared by the head test modules."""

import torch

from lit_retrieval.losses import SymmetricInfoNCE


def assert_gradients_reach_every_parameter_and_steps_lower_the_loss(head, text, video, steps=20, repeats=3):
    """One backward reaches every trainable parameter; `steps` Adam steps on the batch cut the
    InfoNCE loss (averaged over `repeats` forwards, for stochastic heads) by 30%."""
    head.train()
    loss_fn = SymmetricInfoNCE()

    def loss():
        return loss_fn(head.logits(head.score(head.encode_text(text), head.encode_video(video))))

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
