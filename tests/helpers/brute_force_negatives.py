"""The prober-negatives tests' check inside a GVE fit (`helpers.brute_force_negatives.BruteForceNegatives` in its
config): at each epoch start, every pair's mined negatives against a brute-force ranking by the epoch's prober."""

from __future__ import annotations

import json

import lightning as L
import torch

from lit_retrieval.models.gve import GVEEmbedder

NEGATIVES = 2


class BruteForceNegatives(L.Callback):
    """At each epoch start (after the mining): the negatives of every pair equal the `NEGATIVES`
    highest-cosine candidates (distinct targets, then the corpus file's items) other than its positive
    under the epoch's prober: `prober_path` at the first epoch, then the model being trained."""

    def __init__(self, prober_path: str, corpus: str, record: str) -> None:
        self.prober_path = prober_path
        self.corpus = corpus
        self.record = record  # the checked epochs, one per line (the CLI builds this class from its own import)

    def expected(self, prober, data) -> list[list[str]]:
        extra = [json.loads(line) for line in open(self.corpus)]
        candidates = list({r.positive.key: r.positive for r in data.records}.values())
        candidates += [type(candidates[0])(text=t) for t in extra if t not in {c.text for c in candidates}]
        with torch.no_grad():
            queries = prober.embed([r.query for r in data.records], data.spec.instruction).float()
            targets = prober.embed(candidates, data.spec.target_instruction).float()
        ranked = []
        for i, record in enumerate(data.records):
            scored = [
                (float(queries[i] @ targets[j]), c.key)
                for j, c in enumerate(candidates)
                if c.key != record.positive.key
            ]
            ranked.append([key for _, key in sorted(scored, reverse=True)[:NEGATIVES]])
        return ranked

    def on_train_epoch_start(self, trainer, module) -> None:
        epoch = trainer.current_epoch
        data = trainer.datamodule.train_data[0]
        own = self.expected(module.embedder, data)
        if epoch == 0:
            expected = self.expected(
                GVEEmbedder(self.prober_path, lora=None, inputs=module.embedder.processing.config), data
            )
            assert expected != own  # Psi_1 is not the model: the check can tell which one mined
        else:
            expected = own
        assert [[n.key for n in r.negatives] for r in data.records] == expected, epoch
        with open(self.record, "a") as handle:
            handle.write(f"{trainer.global_rank}:{epoch}\n")
