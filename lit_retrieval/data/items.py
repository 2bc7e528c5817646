"""One side of a universal-video-retrieval pair: any mix of text, an image and a video clip.

GVE Definition 1 / Sec. 3.3: queries and targets may be text (T), image (I), video (V) or their
compositions (TI, TV). `MediaItem.modality` spells an item's combination in that notation, and task
files declare theirs as `"T->V"`, `"TI->V"`, ... (GVE Tab. 6-7).

These types belong to the data layer: data modules, task files and the index read them, and models
(`models/gve`) consume them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Protocol

MODALITY_LETTERS = ("T", "I", "V")


class ItemError(ValueError):
    """A malformed item; the message names where it came from."""


@dataclass(frozen=True)
class MediaItem:
    """Text and/or an image file and/or a video file, optionally a `[start, end)` window (seconds)."""

    text: str | None = None
    image: str | None = None
    video: str | None = None
    start: float | None = None
    end: float | None = None

    @property
    def modality(self) -> str:
        """ "T", "V", "TI", "TV", ... in the order T, I, V."""
        present = (self.text is not None, self.image is not None, self.video is not None)
        return "".join(letter for letter, has in zip(MODALITY_LETTERS, present) if has)

    @property
    def key(self) -> str:
        """Identity of the item's content (used to tell duplicate positives from negatives)."""
        window = "" if self.start is None and self.end is None else f"@{self.start}-{self.end}"
        return "|".join([self.text or "", self.image or "", (self.video or "") + window])


def item_from_json(obj: Any, where: str, root: Path | None = None) -> MediaItem:
    """Parse `{"text"?, "image"?, "video"?, "start"?, "end"?}`; relative paths are taken from
    `root`. `where` (file and line) prefixes every error."""
    if isinstance(obj, str):
        obj = {"text": obj}
    if not isinstance(obj, dict):
        raise ItemError(f"{where}: an item must be an object or a string, got {type(obj).__name__}")
    unknown = set(obj) - {"text", "image", "video", "start", "end"}
    if unknown:
        raise ItemError(f"{where}: unknown item field(s) {sorted(unknown)}")
    text = obj.get("text")
    if text is not None and (not isinstance(text, str) or not text.strip()):
        raise ItemError(f"{where}: 'text' must be a non-empty string")
    paths = {}
    for field in ("image", "video"):
        value = obj.get(field)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise ItemError(f"{where}: '{field}' must be a file path")
            path = Path(value)
            paths[field] = os.path.normpath(path if path.is_absolute() or root is None else root / path)
    start, end = obj.get("start"), obj.get("end")
    if (start is not None or end is not None) and "video" not in paths:
        raise ItemError(f"{where}: 'start'/'end' need a 'video'")
    for name, value in (("start", start), ("end", end)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise ItemError(f"{where}: '{name}' must be a non-negative number of seconds")
    if start is not None and end is not None and end <= start:
        raise ItemError(f"{where}: empty window [{start}, {end}]")
    item = MediaItem(
        text=text,
        image=paths.get("image"),
        video=paths.get("video"),
        start=None if start is None else float(start),
        end=None if end is None else float(end),
    )
    if not item.modality:
        raise ItemError(f"{where}: an item needs at least one of 'text', 'image', 'video'")
    return item


def parse_format(spec: str) -> tuple[str, str]:
    """`"TI->V"` -> `("TI", "V")`; letters in T, I, V order."""
    parts = spec.replace("→", "->").split("->")
    if len(parts) != 2:
        raise ValueError(f"a task format looks like 'T->V' or 'TI->V', got {spec!r}")
    sides = []
    for side in parts:
        side = side.strip().upper()
        if not side or any(c not in MODALITY_LETTERS for c in side) or len(set(side)) != len(side):
            raise ValueError(f"a task format uses the letters T, I, V once per side, got {spec!r}")
        sides.append("".join(c for c in MODALITY_LETTERS if c in side))
    return sides[0], sides[1]


class ItemProcessing(Protocol):
    """Turns items (and an optional instruction) into one batch of model inputs; the model provides
    it (e.g. `models.gve.GVEProcessing`) and data modules call it in their workers. One that also has
    `media_rows(batch)` (GVE) has it read there too, for gradient caching's chunks (issue 57.10)."""

    def __call__(self, items: list[MediaItem], instruction: str | None = None) -> Mapping[str, Any]: ...


def item_to_json(item: MediaItem, base: Path) -> dict:
    """The task-file form of an item (the inverse of `item_from_json`), media paths relative to `base`."""
    out: dict = {}
    if item.text is not None:
        out["text"] = item.text
    for field in ("image", "video"):
        value = getattr(item, field)
        if value is not None:
            out[field] = os.path.relpath(value, base)
    if item.start is not None:
        out["start"] = item.start
    if item.end is not None:
        out["end"] = item.end
    return out
