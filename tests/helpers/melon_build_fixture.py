"""A synthetic multi-source fixture for the build-melon tests: four sources in four formats (YouCook2,
chapters, ActivityNet Captions, timestamped QA) over real mp4 files (1 fps, 32 px, PyAV) whose
intervals show one solid colour each, and descriptions that name a colour.

`ColourEmbedder` is the V2T model of the tests: a video window embeds as the share of its frames
(decoded by the project's sampler) nearest to each palette colour, a text as the palette colour it
names, so cos(text, window) is the share of the window showing the named colour: 1 for an aligned
segment, 0 for a misaligned one.

What each video is for (hand counts in tests/melon_build/test_end_to_end.py):
- cook/y1 aligned, 4 segments; cook/y2 two near-identical adjacent captions (T2T); cook/y3 90 s
  (short); cook/y4 5 segments of which 2 show another colour than they name (V2T removes 2);
  cook/y5 a one-word description (broken); cook/y6 a segment past the video's end (invalid).
- chap/c1 aligned chapters given by start only; chap/c2 2 of 3 chapters misaligned (1 left: removed);
  chap/c3 no video file.
- anet/a1 aligned; anet/a2 60 s (short).
- qa/q1 4 QA pairs (captioned by the LLM), one of them UNSEEN (the fake judge flags it); qa/q2 100 s.
"""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import torch
import yaml

from lit_retrieval.data.media.video import SamplingSpec, sample_video

PALETTE = {
    "red": (220, 30, 30),
    "green": (30, 180, 40),
    "blue": (40, 60, 220),
    "yellow": (235, 215, 30),
    "white": (245, 245, 245),
    "black": (0, 0, 0),
}
NAMES = list(PALETTE)


def write_colour_video(path: Path, duration: int, shown: list[tuple[float, float, str]]) -> None:
    """`duration` s at 1 fps, black except where `shown` gives (start, end, colour)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=1)
        stream.width = stream.height = 32
        stream.pix_fmt = "yuv420p"
        for second in range(duration):
            colour = next((c for s, e, c in shown if s <= second + 0.5 < e), "black")
            rgb = np.empty((32, 32, 3), dtype=np.uint8)
            rgb[:] = PALETTE[colour]
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = second
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


class ColourEmbedder:
    """The tests' V2T item embedder (see the module docstring). Every video it embeds is appended to
    `embedded` (class-wide); with `interrupt_after` set, the video after that many raises
    `KeyboardInterrupt` (a build stopped mid-stage)."""

    modalities = {"T", "V"}
    fingerprint = "colour-embedder"
    embedded: list[str] = []
    interrupt_after: int | None = None

    def __init__(self, frames: int = 4) -> None:
        self.spec = SamplingSpec(frames, 32)

    def _window(self, path: str, start: float, end: float) -> np.ndarray:
        sample = sample_video(path, self.spec, start, end)
        means = sample.frames[sample.mask].reshape(int(sample.mask.sum()), -1, 3).mean(1)
        palette = np.array(list(PALETTE.values()), dtype=float)
        nearest = np.argmin(((means[:, None] - palette[None]) ** 2).sum(-1), axis=1)
        return np.bincount(nearest, minlength=len(NAMES)).astype(float)

    def _text(self, text: str) -> np.ndarray:
        words = text.lower().replace(",", " ").replace(".", " ").split()
        out = np.zeros(len(NAMES))
        out[next(NAMES.index(w) for w in words if w in PALETTE)] = 1.0
        return out

    def embed(self, items, instruction=None, batch_size=8) -> torch.Tensor:
        videos = sorted({i.video for i in items if i.video})
        for video in videos:
            if self.interrupt_after is not None and len(self.embedded) >= self.interrupt_after:
                raise KeyboardInterrupt("simulated stop")
            self.embedded.append(video)
        rows = [self._window(i.video, i.start, i.end) if i.video else self._text(i.text) for i in items]
        return torch.nn.functional.normalize(torch.tensor(np.stack(rows), dtype=torch.float32), dim=-1)


# (start, end, description, colour shown)
Y1 = [
    (0, 30, "A chef slices red tomatoes on a wooden board.", "red"),
    (35, 70, "Green paint is rolled onto a large garage wall.", "green"),
    (75, 110, "A blue kayak drifts across a calm mountain lake.", "blue"),
    (115, 145, "Yellow leaves fall onto an empty park bench.", "yellow"),
]
Y2 = [
    (0, 40, "A woman kneads white dough on a floured table.", "white"),
    (45, 90, "A woman kneads the white dough on a floured kitchen table.", "white"),
    (95, 140, "Red sauce simmers in a small metal pot.", "red"),
]
Y4 = [
    (0, 25, "A red tractor ploughs a muddy field at dawn.", "red"),
    (30, 55, "Children in green jackets play football on grass.", "green"),
    (60, 85, "A yellow taxi waits at a busy crossing.", "blue"),
    (90, 115, "A blue whale surfaces beside a fishing boat.", "blue"),
    (120, 145, "Green parrots squawk in a tropical tree.", "red"),
]
C1 = [
    (0, 35, "Red roses are planted along a garden path.", "red"),
    (35, 70, "A green tram rattles through the old town.", "green"),
    (70, 105, "Blue fireworks light the sky over a harbour.", "blue"),
    (105, 140, "A yellow submarine toy floats in a bathtub.", "yellow"),
]
C2 = [
    (0, 45, "A red fox runs across a snowy field.", "red"),
    (45, 90, "A blue bicycle leans against a brick wall.", "green"),
    (90, 140, "White swans glide on a quiet pond.", "yellow"),
]
A1 = [
    (0, 40, "A white cat sleeps on a sunny windowsill.", "white"),
    (45, 85, "A red kite climbs above the windy beach.", "red"),
    (90, 125, "A green lizard basks on a warm rock.", "green"),
]
Q1 = [
    (0, 30, "What is the man holding while he crosses the road?", "a red umbrella", "red"),
    (35, 70, "Which animal drinks from the river?", "a green frog", "green"),
    (75, 110, "What does the girl throw into the air?", "a blue UNSEEN frisbee", "blue"),
    (115, 145, "Where does the old man sit down?", "on a yellow bench", "yellow"),
]


def _youcook(segments, duration):
    return {
        "duration": duration,
        "subset": "training",
        "annotations": [{"segment": [s, e], "sentence": t} for s, e, t, _ in segments],
    }


def make_fixture(root: Path, chat: dict | None, **overrides) -> Path:
    """Write the sources, videos and a build config under `root`; the config's path."""
    videos = root / "videos"
    for name, duration, segments in (
        ("cook/y1", 150, Y1),
        ("cook/y2", 150, Y2),
        ("cook/y4", 150, Y4),
        ("chap/c1", 140, C1),
        ("chap/c2", 140, C2),
        ("anet/a1", 130, A1),
    ):
        write_colour_video(videos / f"{name}.mp4", duration, [(s, e, c) for s, e, _, c in segments])
    write_colour_video(videos / "qa/q1.mp4", 150, [(s, e, c) for s, e, _, _, c in Q1])
    cook = {
        "database": {
            "y1": _youcook(Y1, 150),
            "y2": _youcook(Y2, 150),
            "y3": _youcook(Y1[:2], 90),
            "y4": _youcook(Y4, 150),
            "y5": _youcook([*Y1[:3], (115, 145, "ok!!", "yellow")], 150),
            "y6": _youcook([*Y1[:3], (115, 200, "Yellow leaves fall onto an empty park bench.", "yellow")], 150),
        }
    }
    chapters = [
        {"video_id": "c1", "duration": 140, "chapters": [{"start": s, "title": t} for s, _, t, _ in C1]},
        {"video_id": "c2", "duration": 140, "chapters": [{"start": s, "end": e, "title": t} for s, e, t, _ in C2]},
        {"video_id": "c3", "duration": 140, "chapters": [{"start": s, "title": t} for s, _, t, _ in C1]},
    ]
    anet = {
        "a1": {"duration": 130, "timestamps": [[s, e] for s, e, _, _ in A1], "sentences": [t for _, _, t, _ in A1]},
        "a2": {
            "duration": 60,
            "timestamps": [[s, e] for s, e, _, _ in A1[:1]] * 3,
            "sentences": [t for _, _, t, _ in A1],
        },
    }
    qa = [
        {
            "video_id": "q1",
            "duration": 150,
            "qa": [{"start": s, "end": e, "question": q, "answer": a} for s, e, q, a, _ in Q1],
        },
        {
            "video_id": "q2",
            "duration": 100,
            "qa": [{"start": s, "end": e, "question": q, "answer": a} for s, e, q, a, _ in Q1[:2]],
        },
    ]
    sources = root / "sources"
    sources.mkdir(parents=True, exist_ok=True)
    for name, data in (("cook.json", cook), ("chapters.json", chapters), ("anet.json", anet), ("qa.json", qa)):
        (sources / name).write_text(json.dumps(data))
    config = {
        "sources": [
            {"name": "cook", "format": "youcook2", "annotation": "sources/cook.json", "videos": "videos/cook"},
            {
                "name": "chap",
                "format": "chapters",
                "annotation": "sources/chapters.json",
                "videos": "videos/chap",
                "v2t_threshold": 0.18,
            },
            {"name": "anet", "format": "activitynet", "annotation": "sources/anet.json", "videos": "videos/anet"},
            {"name": "qa", "format": "qa", "annotation": "sources/qa.json", "videos": "videos/qa"},
        ],
        "video_root": "videos",
        "v2t": {"embedder": {"class_path": "helpers.melon_build_fixture.ColourEmbedder"}},
        "split": {"test_fraction": 0.4, "seed": 0},
        "chat": chat,
        **overrides,
    }
    path = root / "build.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
