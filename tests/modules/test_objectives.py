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


def test_mea_on_a_batch_mixing_one_event_and_multi_event_videos():
    """MELON Eqs. 3-9 worked by hand on a batch whose video 1 has one event (no partial query) and video 2
    two (two of L = 3 partial queries, m = 2): every mean over (i, l) runs over the 5 pairs that exist."""
    objectives = TrainingObjectives(MeanPHead(), mea=MEAConfig(weight=0.2, drop=2, num_partial=3))
    texts = objectives.texts([["a", "b", "c"], ["d"], ["e", "f"]], 0, 0, 0)
    partial = texts.partial
    assert partial.events == [["a"], ["b"], ["c"], ["e"], ["f"]]
    assert (partial.owner, partial.slot) == ([0, 0, 0, 2, 2], [0, 1, 2, 0, 1])
    # videos are the basis vectors, so s(v_j, q_i) is component j of text i's vector
    queries = torch.tensor([[0.9, 0.1, 0.2], [0.5, 0.8, 0.3], [0.2, 0.4, 0.7]], dtype=torch.float64)
    own = torch.tensor([0, 0, 0, 2, 2])
    partial_scores = torch.tensor([0.68, 0.95, 0.45, 0.1, 0.65], dtype=torch.float64)
    partial_reps = torch.nn.functional.one_hot(own, 3).double() * partial_scores[:, None]
    step = objectives.score(MeanPHead(), texts, torch.cat([queries, partial_reps]), torch.eye(3).double())
    loss, term = objectives(step)
    # positives 0.9 / 0.8 / 0.7; hardest negative texts (column maxima off the diagonal) 0.5 / 0.4 / 0.3;
    # delta = mean(0.9 - [0.68, 0.95, 0.45], 0.7 - [0.1, 0.65]) = 1.27 / 5; xi = (0.4 + 0.4 + 0.4) / (2 * 3);
    # theta = min(0.254, 0.2) = 0.2 (first step: its own statistics)
    # push = (0.95 - 0.9 + 0.2) + (0.65 - 0.7 + 0.2), the other three hinges negative: 0.40 / 5 = 0.08
    # pull = (0.5 - 0.45) + (0.3 - 0.1): 0.25 / 5 = 0.05
    outputs = {k: v.item() for k, v in term.outputs.items()}
    assert (outputs["mea_delta"], outputs["mea_xi"], outputs["mea_theta"]) == pytest.approx((0.254, 0.2, 0.2))
    assert (outputs["mea_push"], outputs["mea_pull"], outputs["mea_loss"]) == pytest.approx((0.08, 0.05, 0.13))
    assert loss.item() == pytest.approx(outputs["loss_std"] + 0.2 * 0.13)  # Eq. 9, lambda 0.2


def test_the_sigmoid_loss_on_clip_starts_at_siglips_values_or_the_checkpoints(tiny_clip):
    """CLIP records no sigmoid bias: the sigmoid loss starts at SigLIP's t' = log 10, b = -10 (Sec. 3.2);
    `logit_scale_init: encoder` starts at the checkpoint's own logit scale (read here from its weights)."""
    import math

    from transformers import CLIPModel

    from lit_retrieval.models.encoders import CLIPEncoder
    from lit_retrieval.modules import DualEncoderRetrieval
    from lit_retrieval.modules.objectives import ContrastiveConfig

    encoder = CLIPEncoder(pretrained=str(tiny_clip))
    module = DualEncoderRetrieval(encoder, MeanPHead(), contrastive=ContrastiveConfig(loss="sigmoid"))
    assert module.objectives.infonce is None
    assert module.head.logit_scale.item() == pytest.approx(math.log(10.0))
    assert module.objectives.sigmoid.loss.logit_bias.item() == -10.0
    assert DualEncoderRetrieval(encoder, MeanPHead()).head.logit_scale.item() == pytest.approx(math.log(100.0))
    own = CLIPModel.from_pretrained(tiny_clip, local_files_only=True).logit_scale.item()
    module = DualEncoderRetrieval(encoder, MeanPHead(), contrastive=ContrastiveConfig(logit_scale_init="encoder"))
    assert module.objectives.sigmoid is None and module.head.logit_scale.item() == pytest.approx(own)
    with pytest.raises(ValueError, match="logit_bias_init: encoder, but CLIPEncoder's checkpoint records none"):
        DualEncoderRetrieval(encoder, MeanPHead(), contrastive=ContrastiveConfig("sigmoid", logit_bias_init="encoder"))


@pytest.mark.parametrize(
    "options, message",
    [
        ({"average_directions": True}, "average_directions halves InfoNCE; the sigmoid loss has no directions"),
        ({"event_loss": MeVTRLoss()}, "event_loss \\(MeVTR\\) trains with its own loss only: drop model.contrastive"),
    ],
)
def test_sigmoid_combinations_that_do_not_exist_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        TrainingObjectives(MeanPHead(), contrastive="sigmoid", **options)
