"""Composed training objectives: which combinations exist (one place, clear errors), and the
MEA / MeVTR state of checkpoints written before the composition still loads."""

import pytest
import torch

from lit_retrieval.losses import MeVTRLoss
from lit_retrieval.models.heads import MeanPHead, PAUHead, TightTransfHead
from lit_retrieval.modules.multi_event import MEAConfig
from lit_retrieval.modules.objectives import TrainingObjectives, rename_legacy_objective_keys


@pytest.mark.parametrize(
    "options, message",
    [
        ({"mea": MEAConfig(), "event_loss": MeVTRLoss()}, "event_loss \\(MeVTR\\) and mea are exclusive"),
        ({"event_loss": MeVTRLoss(), "cross_device": True}, "cross_device applies to InfoNCE and MEA only"),
        ({"event_loss": MeVTRLoss(), "average_directions": True}, "average_directions scales InfoNCE"),
    ],
)
def test_combinations_that_do_not_exist_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TrainingObjectives(MeanPHead(), **options)


def test_head_specific_refusals_name_the_head():
    with pytest.raises(ValueError, match="PAUHead adds auxiliary losses"):
        TrainingObjectives(PAUHead(), event_loss=MeVTRLoss())
    with pytest.raises(ValueError, match="cross_device needs an indexable head.*TightTransfHead"):
        TrainingObjectives(TightTransfHead(), cross_device=True)


def test_enabled_objectives():
    infonce_mea = TrainingObjectives(MeanPHead(), mea=MEAConfig(weight=0.3))
    assert infonce_mea.infonce is not None and infonce_mea.mea is not None and infonce_mea.event_loss is None
    mevtr = TrainingObjectives(MeanPHead(), event_loss=MeVTRLoss())
    assert mevtr.infonce is None and mevtr.auxiliary is None and mevtr.event_loss is not None
    events = [["a", "b"], ["c"]]
    assert mevtr.texts(events).captions == ["a", "b", "c"] and mevtr.texts(events).owner == [0, 0, 1]


def test_old_checkpoint_keys_load_into_the_composed_objectives():
    class Holder(torch.nn.Module):
        def __init__(self, **options):
            super().__init__()
            self.objectives = TrainingObjectives(MeanPHead(), **options)
            self.register_load_state_dict_pre_hook(rename_legacy_objective_keys)

    old_mea = {
        "mea.loss.prev_delta": torch.tensor(0.25),
        "mea.loss.prev_xi": torch.tensor(0.125),
        "mea.loss.has_prev": torch.tensor(True),
    }
    holder = Holder(mea=MEAConfig())
    holder.load_state_dict(old_mea)
    loss = holder.objectives.mea.loss
    assert (loss.prev_delta.item(), loss.prev_xi.item(), bool(loss.has_prev)) == (0.25, 0.125, True)
    holder = Holder(event_loss=MeVTRLoss(dynamic_alpha=True))
    holder.load_state_dict({"event_loss.prev_ratio": torch.tensor(1.75)})
    assert holder.objectives.event_loss.loss.prev_ratio.item() == 1.75


def test_mea_partial_queries_follow_the_run_seed_unless_mea_seed_is_set(monkeypatch):
    """`mea.seed: null` (default): the draws follow `seed_everything`, so a grid row's seeds differ;
    the same run seed draws the same queries; an explicit `mea.seed` (as older checkpoints hold) is
    kept whatever the run seed."""
    from lightning.pytorch import seed_everything

    events = [[f"event {i} of video {v}" for i in range(6)] for v in range(8)]

    def draws(config: MEAConfig, run_seed: int) -> list[list[str]]:
        seed_everything(run_seed, verbose=False)
        objectives = TrainingObjectives(MeanPHead(), mea=config)
        return [objectives.texts(events, epoch, 0, 0).partial.events for epoch in range(3)]

    monkeypatch.delenv("PL_GLOBAL_SEED", raising=False)
    assert draws(MEAConfig(), 0) != draws(MEAConfig(), 1)
    assert draws(MEAConfig(), 1) == draws(MEAConfig(), 1)
    assert draws(MEAConfig(seed=0), 0) == draws(MEAConfig(seed=0), 1) == draws(MEAConfig(), 0)
