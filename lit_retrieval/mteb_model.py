"""Our models as MTEB models: `MTEBModel` wraps any of the project's item embedders (a GVE /
Qwen2.5-VL directory, a GVE checkpoint, or a dual encoder with an indexable head; `from_spec`
loads one as `index` and `uvrb` do) in mteb 2.x's `EncoderProtocol`, so `mteb.evaluate` runs
it on MTEB's retrieval tasks (the optional `mteb` extra: `pip install -e '.[mteb]'`):

    import mteb
    from lit_retrieval.mteb_model import MTEBModel
    from lit_retrieval.search.loading import ModelSpec

    model = MTEBModel.from_spec(ModelSpec(config="train.yaml", ckpt="last.ckpt"), name="me/clip4clip-meanp")
    mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=None)

The model declares the modalities its embedder takes (`mteb_model_meta.modalities`: text, image and
video for GVE, text and video for dual encoders), so mteb runs its video tasks (t2v, v2t, ...) on it.

`encode` takes MTEB's batches (dicts of lists: `text` strings, `image` PIL images, `video` as mteb
2.x hands it) and returns one unit vector per row; `similarity` is their dot product (the cosine of
GVE Definition 1 and of every indexable head). Query rows get the task's query prompt as the
instruction (GVE's prompts; dual encoders ignore instructions), document rows none, as `uvrb`
embeds corpora.

Videos. mteb's default collator hands each video as the dataset's `datasets.Video` value: a
torchcodec `VideoDecoder` (the `torchcodec` extra and FFmpeg's libraries), no frames decoded. Frames
are taken as mteb's own video wrappers take them, with mteb's `FramesCollator.resample_video` in
fixed-count mode (the X-CLIP / ViCLIP wrappers' `num_frames`): N frames at indices
round(linspace(0, n - 1, N)) of the video's n frames (each frame repeated in place when n < N), N
being what our embedder embeds: a dual encoder its data module's `num_frames`, GVE its clip frame
count for the video's duration (`GVEProcessing.frame_count`; 8 with GVE's defaults fps 1,
max_frames 8, min_frames 32, where mteb's GVE wrapper asks fps=1, max_frames=8: the same 8 frames
for videos of 8 s and more, 8 rather than one a second for shorter ones). These are the frames our
sampler's `linspace_frames` picks from the file itself. A `[T, C, H, W]` uint8 tensor (what mteb's
frame collators produce, when a caller applies one) is taken as it is.

Images and frames reach our embedders as files, which is what they read: an image is written as a
lossless PNG, a video's frames as a lossless RGB H.264 file at one frame per second with every
frame a key frame, which the embedder samples as it samples any video: N frames in N seconds, so a
dual encoder's bin centres and GVE's `linspace_frames` take each written frame once (`exact` and
`keyframe` alike). MTEB's frames, not the original file's own sampling: scores can differ from
`uvrb` on the source files by the frames chosen and their timing (1 s apart in the written file).
Pairwise heads have no embedding to hand MTEB (they score pairs: evaluate them with `uvrb`).
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from lit_retrieval.data.items import MediaItem
from lit_retrieval.errors import ConfigError, InputError
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.search.loading import ModelSpec, load_item_embedder

MODALITIES = {"T": "text", "I": "image", "V": "video"}  # our item kinds' letters -> mteb's modality names
DEFAULT_FRAMES = 8  # an embedder that names no frame count (mteb's GVE wrapper's max_frames)


class MTEBModel:
    """An `ItemEmbedder` as an MTEB `EncoderProtocol` model (module docstring)."""

    def __init__(
        self,
        embedder: ItemEmbedder,
        name: str = "lit-retrieval/model",
        batch_size: int = 8,
        spec: ModelSpec | None = None,
    ) -> None:
        self.embedder = embedder
        self.name = name
        self.batch_size = batch_size
        self.spec = spec  # what `mteb_model_meta.loader` rebuilds the model from
        self._meta: Any = None  # a meta mteb set (`ModelMeta.load_model`), else made from the embedder

    @classmethod
    def from_spec(cls, spec: ModelSpec, name: str = "lit-retrieval/model", batch_size: int = 8) -> MTEBModel:
        """The model `spec` names (`ModelSpec`: a model directory, or a training config + checkpoint)."""
        return cls(load_item_embedder(spec), name, batch_size, spec.resolved())

    @property
    def modalities(self) -> list[str]:
        """mteb's names of the modalities the embedder takes (`ItemEmbedder.modalities`: item kinds
        such as "T", "V", "TV"), in mteb's order: text, image, video."""
        letters = set("".join(self.embedder.modalities))
        return [name for letter, name in MODALITIES.items() if letter in letters]

    @property
    def mteb_model_meta(self):
        """MTEB's metadata: our name and fingerprint (as the revision), cosine similarity, the
        modalities (mteb refuses a task whose query or document modalities the model lacks), the
        parameter count, embedding width and framework a leaderboard entry shows, and, for a model
        made `from_spec`, the `loader` (`load_mteb_model`) and its arguments, so mteb's own
        `ModelMeta.load_model` builds the model as `mteb.get_model` does for its registered models."""
        from mteb.models.model_meta import ModelMeta

        if self._meta is not None:
            return self._meta
        module = embedder_module(self.embedder)
        overwrites = {
            "name": self.name,
            "revision": self.embedder.fingerprint,
            "similarity_fn_name": "cosine",
            "modalities": self.modalities,
            "n_parameters": sum(p.numel() for p in module.parameters()) if module is not None else None,
            "embed_dim": self.embed_dim,
            "framework": frameworks(module),
            "open_weights": True,
        }
        if self.spec is not None:
            settings = {k: v for k, v in asdict(self.spec).items() if k != "device" and v is not None}
            overwrites["loader"] = load_mteb_model
            overwrites["loader_kwargs"] = {**settings, "batch_size": self.batch_size}
        return ModelMeta.create_empty(overwrites)

    @mteb_model_meta.setter
    def mteb_model_meta(self, meta: Any) -> None:
        """mteb's `ModelMeta.load_model` gives the model it built the meta it was built from."""
        self._meta = meta

    @functools.cached_property
    def embed_dim(self) -> int:
        """The embedding width: of one text embedded (every embedder takes text)."""
        return int(self.embedder.embed([MediaItem(text="a")]).shape[-1])

    def video_frames(self, video: Any) -> torch.Tensor:
        """`[T, C, H, W]` uint8 frames of one video as mteb hands it (module docstring)."""
        if isinstance(video, (torch.Tensor, np.ndarray)):
            return checked_frames(torch.as_tensor(video), "a tensor")
        from mteb.models.modality_collators import FramesCollator

        metadata = video.metadata
        count = embedded_frame_count(self.embedder, float(metadata.duration_seconds or 0.0))
        frames = FramesCollator.resample_video(video, num_frames=count)
        if tuple(frames.shape[1:]) == (metadata.height, metadata.width, 3):  # a decoder made with NHWC
            frames = frames.permute(0, 3, 1, 2)
        return checked_frames(frames, f"a decoded video ({metadata.duration_seconds} s)")

    def encode(
        self,
        inputs: Iterable[dict[str, list]],
        *,
        task_metadata: Any,
        hf_split: str,
        hf_subset: str,
        prompt_type: Any = None,
        **kwargs: Any,
    ) -> np.ndarray:
        """One L2-normalised float32 row per input row, in order (module docstring)."""
        instruction = (
            query_instruction(task_metadata) if str(getattr(prompt_type, "value", prompt_type)) == "query" else None
        )
        rows = []
        with tempfile.TemporaryDirectory(prefix="lit-retrieval-mteb-") as scratch:
            for number, batch in enumerate(inputs):
                items = batch_items(batch, Path(scratch) / str(number), self.video_frames)
                rows.append(self.embedder.embed(items, instruction, self.batch_size).float().cpu())
        dim = rows[0].shape[1] if rows else 0
        return torch.cat(rows).numpy() if rows else np.zeros((0, dim), dtype=np.float32)

    def similarity(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """`[N1, N2]` dot products of the unit vectors (cosine)."""
        return torch.as_tensor(embeddings1, dtype=torch.float32) @ torch.as_tensor(embeddings2, dtype=torch.float32).T

    def similarity_pairwise(self, embeddings1: Any, embeddings2: Any) -> torch.Tensor:
        """`[N]` dot products of aligned rows."""
        first, second = (torch.as_tensor(e, dtype=torch.float32) for e in (embeddings1, embeddings2))
        return (first * second).sum(-1)


def query_instruction(task_metadata: Any) -> str | None:
    """The task's query prompt (`TaskMetadata.prompt`: a string, or `{"query": ..., "document": ...}`)."""
    prompt = getattr(task_metadata, "prompt", None)
    if isinstance(prompt, dict):
        return prompt.get("query")
    return prompt


def embedded_frame_count(embedder: Any, seconds: float) -> int:
    """The frames `embedder` embeds of a video `seconds` long: a dual encoder's `spec.num_frames`, GVE's
    `processing.frame_count(seconds)`, else its `num_frames` or `DEFAULT_FRAMES`."""
    spec = getattr(embedder, "spec", None)
    if spec is not None:
        return spec.num_frames
    processing = getattr(getattr(embedder, "embedder", None), "processing", None)
    if processing is not None:
        return processing.frame_count(seconds)
    return int(getattr(embedder, "num_frames", DEFAULT_FRAMES))


def batch_items(
    batch: dict[str, list], folder: Path, video_frames: Callable[[Any], torch.Tensor] = torch.as_tensor
) -> list[MediaItem]:
    """MTEB's batch as our items: each row's text, and its image and video (frames from
    `video_frames`) written under `folder`."""
    size = max(len(v) for k, v in batch.items() if k in ("text", "image", "video"))
    folder.mkdir(parents=True)
    items = []
    for row in range(size):
        text = batch["text"][row] if "text" in batch else None
        image = batch["image"][row] if "image" in batch else None
        video = batch["video"][row] if "video" in batch else None
        items.append(
            MediaItem(
                text=text,
                image=None if image is None else write_image(image, folder / f"{row}.png"),
                video=None if video is None else write_frames(video_frames(video), folder / f"{row}.mp4"),
            )
        )
    return items


def load_mteb_model(
    model_name: str, revision: str | None = None, device: str | None = None, **kwargs: Any
) -> MTEBModel:
    """mteb's loader signature (`ModelMeta.loader`: name, revision, device, the meta's `loader_kwargs`):
    the `ModelSpec` fields (`model`, or `config` [+ `ckpt`]; `sampling`, `frames`, `frame_tokens`) and
    `batch_size`. A `revision` other than the rebuilt model's fingerprint (its files changed since the
    meta was made) is refused in one line."""
    batch_size = int(kwargs.pop("batch_size", 8))
    model = MTEBModel.from_spec(ModelSpec(**kwargs, device=device or "cpu"), model_name, batch_size)
    if revision is not None and revision != model.embedder.fingerprint:
        raise ConfigError(
            f"{model_name}: revision {revision} is not this model's ({model.embedder.fingerprint}): its files changed"
        )
    return model


def embedder_module(embedder: Any) -> torch.nn.Module | None:
    """The torch module an item embedder runs (a dual encoder's LightningModule, GVE's embedder)."""
    for name in ("module", "embedder"):
        if isinstance(getattr(embedder, name, None), torch.nn.Module):
            return getattr(embedder, name)
    return None


def frameworks(module: torch.nn.Module | None) -> list[str]:
    """mteb's framework names: PyTorch, and Transformers where a transformers model runs inside."""
    if module is None:
        return ["PyTorch"]
    uses_transformers = any(type(m).__module__.startswith("transformers.") for m in module.modules())
    return ["PyTorch", "Transformers"] if uses_transformers else ["PyTorch"]


def checked_frames(frames: torch.Tensor, what: str) -> torch.Tensor:
    """`frames` if they are `[T, 3, H, W]` with T >= 1; else an `InputError` saying what the input was
    and what is expected (a 3-D tensor was a bare `permute` error, zero frames a missing temp file)."""
    if frames.ndim != 4 or frames.shape[1] != 3 or frames.shape[0] == 0:
        raise InputError(
            f"MTEB video input: {what} of shape {tuple(frames.shape)}; expected [T, 3, H, W] uint8 frames, T >= 1"
        )
    return frames


def write_image(image: Image.Image, path: Path) -> str:
    image.convert("RGB").save(path)
    return str(path)


def write_frames(frames: torch.Tensor, path: Path) -> str:
    """`[T, C, H, W]` uint8 frames as a lossless RGB H.264 file at 1 frame per second (even sizes),
    every frame a key frame (x264's `g` 1: `keyframe` sampling then takes the frames `exact` takes)."""
    import av

    pixels = np.ascontiguousarray(torch.as_tensor(frames).permute(0, 2, 3, 1).cpu().numpy().astype(np.uint8))
    height, width = pixels.shape[1] // 2 * 2, pixels.shape[2] // 2 * 2
    with av.open(str(path), "w") as container:
        options = {"crf": "0", "preset": "ultrafast", "g": "1"}
        stream = container.add_stream("libx264rgb", rate=1, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, "rgb24"
        for frame in pixels:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame[:height, :width], format="rgb24")))
        container.mux(stream.encode())
    return str(path)
