"""`MEAConfig`: the YAML block `model.mea`, the settings of the MEA objective (MELON Eq. 9).

`MultiEventObjective` (`modules/objectives.py`) builds the partial-query sampler and the `MEALoss`
from it. (This class path is recorded in checkpoints' hyper-parameters, so it stays here.)
"""

from __future__ import annotations

from dataclasses import dataclass

from lit_retrieval.data.text.queries import PartialSource
from lit_retrieval.errors import ConfigError


@dataclass
class MEAConfig:
    """MEA loss settings; defaults are MELON supp. B.1 for CLIP4Clip.

    Args:
        weight: lambda of Eq. 9 (CLIP4Clip 0.2, X-CLIP 0.7, TS2-Net 0.1, UCoFiA 0.7, UATVR 0.2,
            PAU 0.3, TempMe 0.2).
        drop: m, events omitted from a query to form a partial query.
        num_partial: L, distinct partial queries drawn per sample and step.
        use_xi / use_pull: the Tab. 3 ablation switches (upper bound xi, pull term).
        source: `drop_events` (partial queries), or the Tab. 7 stand-ins `replace_words` and
            `shuffle_events`.
        replace_prob: word replacement probability for `replace_words`.
        seed: seed of the partial-query draws (with epoch, batch index and rank); null (default):
            the run's `seed_everything`, so the seeds of a grid row draw different partial queries.
            Checkpoints saved with an explicit seed (older ones: 0) keep it.
    """

    weight: float = 0.2
    drop: int = 2
    num_partial: int = 3
    use_xi: bool = True
    use_pull: bool = True
    source: PartialSource = "drop_events"
    replace_prob: float = 0.3
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ConfigError(f"mea.weight (lambda) must be >= 0, got {self.weight}")
