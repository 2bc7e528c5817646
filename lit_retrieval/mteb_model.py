"""Our models as MTEB models: `MTEBModel` wraps any of the project's item embedders (a GVE /
Qwen2.5-VL directory, a GVE checkpoint, or a dual encoder with an indexable head; `from_spec`
loads one as `index` and `uvrb` do) in mteb 2.x's `EncoderProtocol`, so `mteb.evaluate` runs
it on MTEB's retrieval tasks (the optional `mteb` extra: `pip install -e '.[mteb]'`):

    import mteb
    from lit_retrieval.mteb_model import MTEBModel
    from lit_retrieval.search.loading import ModelSpec

    model = MTEBModel.from_spec(ModelSpec(config="train.yaml", ckpt="last.ckpt"), name="me/clip4clip-meanp")
    mteb.evaluate(model, mteb.get_tasks(tasks=["SciFact"]), cache=None)

`encode` takes MTEB's batches (dicts of lists: `text` strings, `image` PIL images, `video`
`[T, C, H, W]` uint8 frames as MTEB's video collator hands them) and returns one unit vector per
row; `similarity` is their dot product (the cosine of GVE Definition 1 and of every indexable
head). Query rows get the task's query prompt as the instruction (GVE's prompts; dual encoders
ignore instructions), document rows none, as `uvrb` embeds corpora. Images and frames reach our
embedders as files, which is what they read: an image is written as a lossless PNG, a video's
frames as a lossless RGB H.264 file at one frame per second, which the embedder samples as it
samples any video (its own frame count, `exact` or `keyframe`): MTEB's frames, not the original
file's, so video scores can differ from `uvrb` on the source files by the frames MTEB chose.
Pairwise heads have no embedding to hand MTEB (they score pairs: evaluate them with `uvrb`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from lit_retrieval.data.items import MediaItem
from lit_retrieval.search.embedders import ItemEmbedder
from lit_retrieval.search.loading import ModelSpec, load_item_embedder


class MTEBModel:
    """An `ItemEmbedder` as an MTEB `EncoderProtocol` model (module docstring)."""

    def __init__(self, embedder: ItemEmbedder, name: str = "lit-retrieval/model", batch_size: int = 8) -> None:
        self.embedder = embedder
        self.name = name
        self.batch_size = batch_size

    @classmethod
    def from_spec(cls, spec: ModelSpec, name: str = "lit-retrieval/model", batch_size: int = 8) -> MTEBModel:
        """The model `spec` names (`ModelSpec`: a model directory, or a training config + checkpoint)."""
        return cls(load_item_embedder(spec), name, batch_size)

    @property
    def mteb_model_meta(self):
        """MTEB's metadata: our name and fingerprint (as the revision), cosine similarity."""
        from mteb.models.model_meta import ModelMeta

        overwrites = {"name": self.name, "revision": self.embedder.fingerprint, "similarity_fn_name": "cosine"}
        return ModelMeta.create_empty(overwrites)

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
                items = batch_items(batch, Path(scratch) / str(number))
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


def batch_items(batch: dict[str, list], folder: Path) -> list[MediaItem]:
    """MTEB's batch as our items: each row's text, and its image and video written under `folder`."""
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
                video=None if video is None else write_frames(video, folder / f"{row}.mp4"),
            )
        )
    return items


def write_image(image: Image.Image, path: Path) -> str:
    image.convert("RGB").save(path)
    return str(path)


def write_frames(frames: torch.Tensor, path: Path) -> str:
    """`[T, C, H, W]` uint8 frames as a lossless RGB H.264 file at 1 frame per second (even sizes)."""
    import av

    pixels = np.ascontiguousarray(torch.as_tensor(frames).permute(0, 2, 3, 1).numpy().astype(np.uint8))
    height, width = pixels.shape[1] // 2 * 2, pixels.shape[2] // 2 * 2
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264rgb", rate=1, options={"crf": "0", "preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = width, height, "rgb24"
        for frame in pixels:
            container.mux(stream.encode(av.VideoFrame.from_ndarray(frame[:height, :width], format="rgb24")))
        container.mux(stream.encode())
    return str(path)
