"""Build an `ItemEmbedder` from what a user has: a model directory (GVE / Qwen2.5-VL, embedded as
is) or a training config with a checkpoint of any of the project's modules (GVE, or a dual
encoder with an indexable head; with `pairwise`, any head: UVRB). `ModelSpec` records the choice
so an index can rebuild it."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from lit_retrieval.checkpoint_io import read_checkpoint
from lit_retrieval.data.media.shots import ShotConfig, ShotDetectorConfig, Shots, detect_many
from lit_retrieval.errors import ConfigError, UsageError
from lit_retrieval.models.gve import GVEEmbedder, InputConfig
from lit_retrieval.models.gve.embedder import placed_on
from lit_retrieval.models.gve.processing import scaled_inputs
from lit_retrieval.data.media.identity import tree_identity
from lit_retrieval.search.embedders import FrameInput, GVEItemEmbedder, HeadItemEncoder, ItemEmbedder


@dataclass(frozen=True)
class ModelSpec:
    model: str | None = None  # a model directory
    config: str | None = None  # a training config (YAML)
    ckpt: str | None = None  # its checkpoint
    device: str = "cpu"
    sampling: str = "exact"  # video frames: `exact` or `keyframe` (see lit_retrieval.data.media.video)
    frames: int | None = None  # test-time frames per video (GVE A.12; None: the model's setting)
    frame_tokens: int | None = None  # test-time max visual tokens per frame, GVE models only (GVE A.12)

    def __post_init__(self) -> None:
        if (self.model is None) == (self.config is None):
            raise ConfigError("give exactly one of --model (a model directory) or --config (a training config)")
        if self.ckpt is not None and self.config is None:
            raise ConfigError("a checkpoint needs the training config it was trained with (--config)")

    def resolved(self) -> ModelSpec:
        """Absolute paths, so an index remembers its model wherever search runs from."""
        absolute = {
            k: str(Path(v).resolve()) if v and k in ("model", "config", "ckpt") else v for k, v in asdict(self).items()
        }
        return ModelSpec(**absolute)


def load_checkpoint_weights(module, ckpt: str) -> None:
    state = read_checkpoint(ckpt, map_location="cpu", weights_only=False)  # clear errors for corrupt files
    adapters_only = not module.strict_loading  # GVE checkpoints hold the LoRA weights only
    if adapters_only:
        module.on_load_checkpoint(state)  # refuses a checkpoint of another LoRA setting
    result = module.load_state_dict(state["state_dict"], strict=not adapters_only)
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"{ckpt}: weights this model does not have: {result.unexpected_keys[:3]}")


def load_item_embedder(spec: ModelSpec, pairwise: bool = False) -> ItemEmbedder | HeadItemEncoder:
    """The model of `spec` as an item embedder; with `pairwise`, a dual encoder whose head is not
    indexable comes as a `HeadItemEncoder` of the head's representations (UVRB scores them with
    the head; an index never asks for one), its videos' shots detected as the config's `data.shots`
    says (SALI)."""
    if spec.model is not None:
        if not (Path(spec.model) / "config.json").is_file():
            raise FileNotFoundError(f"{spec.model}: not a model directory (no config.json)")
        inputs = scaled_inputs(InputConfig(sampling=spec.sampling), spec.frames, spec.frame_tokens)
        return GVEItemEmbedder(
            GVEEmbedder(spec.model, lora=None, inputs=inputs, device=spec.device).to(spec.device),
            tree_identity(spec.model),
        )
    from lit_retrieval.retrieval_cli import build_module

    with placed_on(spec.device):  # GVE's dtype and attention `auto` follow the device it runs on
        module, data = build_module(spec.config)
    identity = [Path(spec.config).read_text(), tree_identity(spec.ckpt) if spec.ckpt else None]
    if spec.ckpt:
        load_checkpoint_weights(module, spec.ckpt)
    if hasattr(module, "processing"):  # GVE: its own frame sampling and pixel budget
        module.processing.config = scaled_inputs(module.processing.config, spec.frames, spec.frame_tokens)
    elif spec.frame_tokens is not None:
        raise UsageError(
            spec.config, "tokens per frame apply to GVE / Qwen2.5-VL models, not this one (fixed frame size)"
        )
    frames = FrameInput(
        spec.frames or data.get("num_frames", 12),
        data.get("image_size", 224),
        data.get("mean"),
        data.get("std"),
        spec.sampling,
    )
    module = module.to(spec.device)
    head = getattr(module, "head", None)
    if not pairwise or head is None or head.indexable:
        return module.item_embedder(identity, frames)
    shots, shot_key = shot_source(data["shots"]) if data.get("shots") else (None, None)
    settings = (frames.num_frames, frames.image_size, frames.mean, frames.std, frames.sampling)
    return HeadItemEncoder(module, identity, *settings, shots=shots, shot_key=shot_key)


def shot_source(settings: dict) -> tuple[Callable[[list[str]], list[Shots]], dict]:
    """The shots of videos as a training config's `data.shots` (a `ShotConfig`) detects and caches
    them, and the detector settings that name them."""
    config = ShotConfig(**{**settings, "detector": ShotDetectorConfig(**(settings.get("detector") or {}))})

    def shots(paths: list[str]) -> list[Shots]:
        found = detect_many(paths, config.detector, config.cache_dir, config.workers, progress=False).shots
        return [found[p] for p in paths]

    return shots, asdict(config.detector)


def gve_module_from_checkpoint(ckpt: str, model_path: str | None):
    """`GVERetrieval` rebuilt from the checkpoint's stored hyper-parameters (as LightningCLI or a
    direct construction saved them), its LoRA weights loaded."""
    from lightning.pytorch.cli import instantiate_module

    from lit_retrieval.modules.gve import GVERetrieval

    hparams = dict(read_checkpoint(ckpt, map_location="cpu").get("hyper_parameters") or {})
    hparams.pop("_instantiator", None)
    embedder = hparams.get("embedder")
    changes = {"gradient_checkpointing": False, **({"model_path": model_path} if model_path else {})}
    if isinstance(embedder, dict):  # LightningCLI stores the parsed config
        hparams["embedder"] = {**embedder, **changes}
        module = instantiate_module(GVERetrieval, hparams)
    elif dataclasses.is_dataclass(embedder):
        accepted = set(inspect.signature(GVERetrieval).parameters)
        kwargs = {k: v for k, v in hparams.items() if k in accepted}
        module = GVERetrieval(**{**kwargs, "embedder": dataclasses.replace(embedder, **changes)})
    else:
        raise UsageError(ckpt, "no GVE hyper-parameters stored in this checkpoint; give the training config (--config)")
    if not isinstance(module, GVERetrieval):
        raise UsageError(ckpt, f"not a GVE checkpoint (its module is a {type(module).__name__})")
    load_checkpoint_weights(module, ckpt)
    return module


def gve_module_from_config(config: str, ckpt: str):
    """`GVERetrieval` as its training config builds it, the checkpoint's LoRA weights loaded."""
    from lit_retrieval.retrieval_cli import build_module

    module, _ = build_module(config)
    if not hasattr(module, "embedder"):
        raise UsageError(config, f"not a GVE training config (its model is a {type(module).__name__})")
    load_checkpoint_weights(module, ckpt)
    return module
