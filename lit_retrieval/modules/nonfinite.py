"""What a training step does with a NaN or infinite loss: skip the step (no backward, no
optimizer update) and count it, logging the batch's sample ids, or stop the run with them.
Under DDP the decision is shared: if any rank's loss is non-finite every rank skips, so no rank
waits for another's gradients."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import lightning as L
import torch

from lit_retrieval.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class NonFinitePolicy:
    """`skip` (default) or `raise`; a skip run still stops after `max_skipped` skipped steps."""

    action: Literal["skip", "raise"] = "skip"
    max_skipped: int = 100

    def __post_init__(self) -> None:
        if self.action not in ("skip", "raise") or self.max_skipped < 0:
            raise ConfigError(f"nonfinite.action must be 'skip' or 'raise' and max_skipped >= 0, got {self}")


class NonFiniteGuard:
    def __init__(self, policy: NonFinitePolicy | None = None) -> None:
        self.policy = policy or NonFinitePolicy()
        self.skipped = 0

    def allows(self, module: L.LightningModule, loss: torch.Tensor, ids: list[str]) -> bool:
        """True when the step may go on; False (after counting and logging) when it is skipped."""
        bad = not bool(torch.isfinite(loss.detach()).all())
        trainer = module._trainer
        if trainer is not None and trainer.world_size > 1:
            bad = trainer.strategy.reduce_boolean_decision(bad, all=False)
        if not bad:
            return True
        self.skipped += 1
        where = f"epoch {module.current_epoch}, global step {module.global_step}"
        value = float(loss.detach().float().mean())
        message = f"non-finite loss ({value}) at {where}; samples on rank {module.global_rank}: {ids[:32]}"
        if self.policy.action == "raise":
            raise FloatingPointError(message)
        if self.skipped > self.policy.max_skipped:
            raise FloatingPointError(
                f"{message}; {self.skipped} steps skipped, more than nonfinite.max_skipped={self.policy.max_skipped}"
            )
        log.warning("%s: step skipped (%d so far)", message, self.skipped)
        return False
