"""`last.ckpt` is the newest state at the end of every fit, however many interval checkpoints
`ResumeCheckpoint` wrote before (issue 24: Lightning's `ModelCheckpoint(save_last=True,
save_top_k=0)` writes `last.ckpt` at the end of training only if it never wrote one before, so
after an interval checkpoint the file kept the step of the last interval)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from lit_retrieval.callbacks import ResumeCheckpoint
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.modules import DualEncoderRetrieval


@pytest.mark.parametrize("save_top_k", [0, 1])
def test_the_final_last_checkpoint_holds_the_final_step_and_weights(tmp_path, tiny_clip, corpus, save_top_k):
    """3 epochs of 4 steps with an interval checkpoint every 5 steps (steps 5 and 10): the final
    last.ckpt holds step 12 and the weights the module has in memory when fit returns."""
    L.seed_everything(0)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead())
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=2, image_size=32, batch_size=4, num_workers=0
    )
    checkpoints = tmp_path / "checkpoints"
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=3,
        limit_train_batches=4,
        limit_val_batches=0,
        logger=False,
        default_root_dir=str(tmp_path),
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            ResumeCheckpoint(every_n_steps=5, every_n_minutes=None),
            ModelCheckpoint(dirpath=str(checkpoints), save_last=True, save_top_k=save_top_k),
        ],
    )
    trainer.fit(module, data)
    assert trainer.global_step == 12
    saved = torch.load(checkpoints / "last.ckpt", weights_only=False)
    assert saved["global_step"] == 12
    weights = module.state_dict()
    assert saved["state_dict"].keys() == weights.keys()
    for name, value in weights.items():
        torch.testing.assert_close(saved["state_dict"][name], value, atol=0, rtol=0, msg=name)
