"""`GVEEmbedder`: Qwen2.5-VL as a fixed-length multimodal encoder (GVE Sec. 3.3, A.7, A.8).

The model is the native `Qwen2_5_VLForConditionalGeneration` (through `AutoModelForImageTextToText`,
so a Qwen2-VL prober such as GME loads too) from a local directory: a Qwen2.5-VL-3B/7B-Instruct
snapshot, a released GVE checkpoint (its custom class is only a wrapper around the same weights;
tests/models/gve/test_embedder.py loads that layout), or a tiny random model. The embedding is the final hidden state
of the last attended position (A.7: p_i = max{j | M_ij = 1}, padding side agnostic), L2-normalised.

LoRA (A.8, Tab. 9): rank 16, alpha 32, dropout 0.1 on q/k/v/up/down/gate projections of the
language model only (the vision tower's MLP also has up/down/gate projections: they stay frozen,
as do the token embeddings and everything else).

Not in the paper (issue 55, experiment E2b): `full_training` trains every weight (no LoRA), to make
a stand-in for a pretrained base from the tiny random model, and `base_checkpoint` loads such a
run's weights into the model before LoRA wraps it, so LoRA then trains on a base that has learned.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn
from transformers import AutoModelForImageTextToText, AutoProcessor

from lit_retrieval.data.items import MediaItem
from lit_retrieval.errors import ConfigError
from lit_retrieval.models.gve.export import save_release
from lit_retrieval.models.gve.positions import MRopeLayout, release_mrope_positions
from lit_retrieval.models.gve.processing import GVEProcessing, InputConfig


@dataclass
class AdapterConfig:
    """LoRA on the language model (GVE Tab. 9 defaults)."""

    r: int = 16
    alpha: int = 32
    dropout: float = 0.1
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "up_proj", "down_proj", "gate_proj"]
    )
    scope: str = "language_model"

    def peft_config(self) -> LoraConfig:
        names = "|".join(self.target_modules)
        return LoraConfig(
            r=self.r,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=rf".*{self.scope}.*\.({names})$",
        )


# the name before the config-naming convention; checkpoints pickled it in their hyper-parameters
LoRASettings = AdapterConfig


def last_token_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """`hidden[i, p_i]` with p_i the last position whose mask is 1 (left or right padding)."""
    length = attention_mask.shape[1]
    last = length - 1 - attention_mask.flip(1).long().argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]


# the device a model built inside `placed_on` will run on (see there)
_TARGET_DEVICE: contextvars.ContextVar[torch.device | None] = contextvars.ContextVar("gve_target_device", default=None)


@contextlib.contextmanager
def placed_on(device: str | torch.device) -> Iterator[None]:
    """Embedders built inside run on `device`: for a caller that places a model it does not build
    itself (`search.loading` builds a GVE training config through the config parser, which has no
    device option, then moves the module to `--device`)."""
    token = _TARGET_DEVICE.set(torch.device(device))
    try:
        yield
    finally:
        _TARGET_DEVICE.reset(token)


def target_device(device: str | torch.device | None) -> torch.device:
    """Where the model will run: `device`, else the one `placed_on` names, else the GPU when one is
    visible (where Lightning's `accelerator: auto` trains it), else the CPU."""
    if device is not None:
        return torch.device(device)
    placed = _TARGET_DEVICE.get()
    if placed is not None:
        return placed
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_attention(choice: str, device: torch.device, dtype: torch.dtype) -> str:
    """`auto`: flash-attention-2 for a model running on CUDA in bf16/fp16 (the only dtypes
    flash-attention computes in) when `flash_attn` is installed, else PyTorch SDPA."""
    if choice != "auto":
        return choice
    half = dtype in (torch.bfloat16, torch.float16)
    if device.type == "cuda" and half and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def resolve_dtype(choice: str, device: torch.device) -> torch.dtype:
    """`auto`: bfloat16 for a model running on a GPU that supports it, else float32."""
    if choice == "auto":
        return torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[choice]


CHECKPOINT_PREFIX = "embedder.model."  # GVERetrieval's name for the embedder's transformers model


def load_base_weights(model: nn.Module, checkpoint: str) -> None:
    """Copy a full-training GVE checkpoint's weights (`embedder.model.*`) into `model`; every
    parameter must be there (a LoRA-only checkpoint is refused, naming the file)."""
    path = Path(checkpoint)
    if not path.is_file():
        raise ConfigError(f"embedder.base_checkpoint: {checkpoint} is not a file")
    try:
        stored = torch.load(path, map_location="cpu", weights_only=False)["state_dict"]
    except Exception as error:  # noqa: BLE001 - any unreadable file is one line
        raise ConfigError(f"embedder.base_checkpoint: {checkpoint} is not a Lightning checkpoint ({error})") from error
    weights = {k.removeprefix(CHECKPOINT_PREFIX): v for k, v in stored.items() if k.startswith(CHECKPOINT_PREFIX)}
    missing = sorted({name for name, _ in model.named_parameters()} - set(weights))
    if missing:
        raise ConfigError(
            f"embedder.base_checkpoint: {checkpoint} lacks {len(missing)} of the model's weights "
            f"(e.g. {missing[0]}): give the checkpoint of an embedder.full_training run"
        )
    model.load_state_dict(weights, strict=False)


class GVEEmbedder(nn.Module):
    """Embeds lists of `MediaItem`s with a (LoRA-tuned) Qwen2.5-VL.

    Args:
        model_path: local directory of the model and its processor.
        lora: LoRA settings; `None` embeds with the model as loaded (frozen).
        adapter_path: a saved LoRA adapter to load (and keep training if `lora` is set).
        inputs: frame sampling, pixel budgets, token cap.
        gradient_checkpointing: recompute activations in backward (GVE A.8), non-reentrant.
        dtype: `auto` (`resolve_dtype`), `float32`, `bfloat16` or `float16` weights.
        attn_implementation: `auto` (`resolve_attention`), `sdpa`, `eager` or `flash_attention_2`.
        full_training: train every weight of the model (needs `lora` and `adapter_path` unset).
        base_checkpoint: a GVE training checkpoint of a `full_training` run whose weights replace
            the loaded ones before any LoRA (every parameter of the model must be in it).
        device: where the model will run, which `auto` resolves from (`target_device`; None: the
            device of an enclosing `placed_on`, else the GPU when one is visible). The caller moves it.
    """

    def __init__(
        self,
        model_path: str,
        lora: AdapterConfig | None = None,
        adapter_path: str | None = None,
        inputs: InputConfig | None = None,
        gradient_checkpointing: bool = False,
        dtype: str = "auto",
        attn_implementation: str = "auto",
        full_training: bool = False,
        base_checkpoint: str | None = None,
        device: str | torch.device | None = None,
    ) -> None:
        super().__init__()
        if full_training and (lora is not None or adapter_path is not None):
            raise ConfigError("embedder.full_training trains every weight: set embedder.lora: null, no adapter_path")
        path = Path(model_path)
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"embedder.model_path: {model_path} is not a model directory (no config.json); "
                "give a local Qwen2.5-VL or GVE path"
            )
        target = target_device(device)
        weights = resolve_dtype(dtype, target)
        model = AutoModelForImageTextToText.from_pretrained(
            str(path), dtype=weights, attn_implementation=resolve_attention(attn_implementation, target, weights)
        )
        model.config.use_cache = False
        if base_checkpoint is not None:
            load_base_weights(model, base_checkpoint)
        model.requires_grad_(full_training)
        if adapter_path is not None:
            model = PeftModel.from_pretrained(model, adapter_path, is_trainable=lora is not None)
        elif lora is not None:
            model = get_peft_model(model, lora.peft_config())
        if gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        self.model = model.train()  # from_pretrained leaves eval mode; a new module trains (LoRA dropout on)
        self.model_path = str(path)
        self.processing = GVEProcessing(AutoProcessor.from_pretrained(str(path)), inputs)
        self.rope_layout = MRopeLayout.from_config(self.base_model.config)

    @property
    def dim(self) -> int:
        return int(self.base_model.config.text_config.hidden_size)

    @property
    def base_model(self) -> nn.Module:
        """The transformers model under any peft wrapper."""
        return self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model

    def positions(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The batch's M-RoPE positions by the release-era rule GVE was trained with (see `positions`)."""
        return release_mrope_positions(
            batch["input_ids"],
            batch.get("attention_mask"),
            self.rope_layout,
            batch.get("image_grid_thw"),
            batch.get("video_grid_thw"),
            batch.get("second_per_grid_ts"),
        )

    def forward(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """L2-normalised embeddings `[B, d]` (float32) of a processed batch, with explicit M-RoPE
        positions, so the result does not depend on the installed transformers' position rule."""
        positions = self.positions(batch)
        inputs, unused = self.vision_in_fixed_order(batch) if self.zero3_partitioned() else (batch, None)
        out = self.model(**inputs, position_ids=positions, output_hidden_states=True, use_cache=False, logits_to_keep=1)
        pooled = last_token_pool(out.hidden_states[-1], batch["attention_mask"])
        if unused is not None:  # keeps a trainable tower's backward on every rank too
            pooled = pooled + 0.0 * unused
        return F.normalize(pooled.float(), dim=-1)

    def zero3_partitioned(self) -> bool:
        """Whether DeepSpeed ZeRO-3 has partitioned the weights (each sub-module's call gathers them)."""
        return hasattr(next(self.base_model.model.visual.parameters()), "ds_id")

    def vision_in_fixed_order(self, batch: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The batch with its image and video features computed here, always as one vision-tower
        call for images and then one for videos, on a one-token dummy input where the batch has
        none; and the sum of the dummy outputs. Under ZeRO-3 every rank must call the same
        sub-modules in the same order (each call all-gathers their weights), but Qwen2.5-VL calls
        its vision tower only for the kinds a batch holds: a text batch on one rank beside a video
        batch on another deadlocked (NCCL) or failed (gloo: "Received data size doesn't match")."""
        base, inputs = self.base_model, dict(batch)
        features: dict[str, Any] = {}
        unused = torch.zeros((), device=batch["input_ids"].device)
        for kind, pixels, grid, encode in (
            ("image", "pixel_values", "image_grid_thw", base.get_image_features),
            ("video", "pixel_values_videos", "video_grid_thw", base.get_video_features),
        ):
            if inputs.get(pixels) is not None:
                features[kind] = encode(inputs.pop(pixels), inputs[grid], return_dict=True)
            else:
                dummy, dummy_grid = self._dummy_vision_input(unused.device)
                unused = unused + torch.cat(encode(dummy, dummy_grid, return_dict=True).pooler_output).sum()
        return {**inputs, "mm_encoder_outputs": features}, unused

    def _dummy_vision_input(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero pixels of one merged token: a 1 x m x m patch grid (m: the spatial merge size)."""
        vision = self.base_model.config.vision_config
        merge = int(vision.spatial_merge_size)
        width = int(vision.in_channels) * int(vision.temporal_patch_size) * int(vision.patch_size) ** 2
        grid = torch.tensor([[1, merge, merge]], device=device)
        return torch.zeros(merge * merge, width, device=device), grid

    def process(self, items: list[MediaItem], instruction: str | None = None) -> dict[str, torch.Tensor]:
        return dict(self.processing(items, instruction))

    @torch.no_grad()
    def embed(self, items: list[MediaItem], instruction: str | None = None, batch_size: int = 8) -> torch.Tensor:
        """Embeddings of `items` (eval mode, no gradient), `[N, d]` on the model's device."""
        device = next(self.model.parameters()).device
        was_training = self.training
        self.eval()
        try:
            out = []
            for i in range(0, len(items), batch_size):
                batch = {k: v.to(device) for k, v in self.process(items[i : i + batch_size], instruction).items()}
                out.append(self(batch))
            return torch.cat(out) if out else torch.empty(0, self.dim, device=device)
        finally:
            self.train(was_training)

    def save_adapter(self, out_dir: str | Path) -> None:
        """Write only the LoRA weights and their config (peft format)."""
        if not isinstance(self.model, PeftModel):
            raise ValueError("this embedder has no LoRA adapter to save")
        self.model.save_pretrained(str(out_dir))

    def save_merged(self, out_dir: str | Path) -> Path:
        """Write a plain Qwen2.5-VL directory (LoRA merged in) plus the processor, in the released
        checkpoints' layout: loadable with transformers 4.5x or 5.x alone, or as `model_path` here."""
        model = self.model
        if isinstance(model, PeftModel):  # merge into a copy: this embedder keeps its adapter
            model = copy.deepcopy(model).merge_and_unload(safe_merge=True)
        return save_release(model, self.processing.processor, out_dir)
