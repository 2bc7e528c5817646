"""Synthetic multi-event video corpus: the embedded default data set (no download needed).

Each event is a distinct scene (shape, colour, size, motion, background) described by a natural
sentence drawn from several templates and synonyms. Events come from a shared pool and each occurs
in several videos (`occurrences`, default 3-6), so a single-event query is ambiguous while the full
3-5-event query is not: the partial-overlap situation MELON (Sec. 1, Fig. 1) is about. Consecutive
events are separated by hard cuts; with probability `recur_prob` the first event returns at the end,
giving it two intervals. With `relational_fraction > 0` that share of the pool becomes relational
scenes for SALI: two characters (shapes) filmed in alternating shot / reverse shot within the
event, described with an interpersonal verb ("the red circle confronts the blue square"); the
inner cuts are ground-truth cuts too. Videos are real H.264 mp4 files written with PyAV; annotations use the
canonical format of `lit_retrieval.data.annotations`, with the ground-truth cut times in `cuts`.
Everything is a deterministic function of the seed.
"""

from __future__ import annotations

import json
import math
import os
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import av
import numpy as np

from lit_retrieval.data.annotations import save_annotations
from lit_retrieval.data.records import Event, VideoRecord
from lit_retrieval.progress import Progress

COLOURS = {
    "red": ((215, 35, 35), ["red", "crimson", "scarlet"]),
    "green": ((40, 185, 60), ["green", "lime green", "emerald"]),
    "blue": ((45, 85, 235), ["blue", "cobalt blue", "bright blue"]),
    "yellow": ((240, 220, 40), ["yellow", "golden yellow", "lemon"]),
    "cyan": ((40, 220, 225), ["cyan", "turquoise", "aqua"]),
    "magenta": ((220, 55, 205), ["magenta", "pink", "fuchsia"]),
    "white": ((248, 248, 248), ["white", "snow white", "pale white"]),
    "orange": ((250, 140, 25), ["orange", "tangerine", "amber"]),
}
BACKGROUNDS = {
    "black": ((8, 8, 8), ["black", "dark", "pitch black"]),
    "gray": ((118, 118, 118), ["gray", "grey", "slate"]),
    "navy": ((18, 28, 95), ["navy", "dark blue", "midnight blue"]),
    "forest": ((22, 75, 32), ["forest green", "dark green", "deep green"]),
    "maroon": ((100, 18, 30), ["maroon", "burgundy", "wine red"]),
    "beige": ((205, 190, 150), ["beige", "sandy", "tan"]),
}
SHAPES = {
    "circle": ["circle", "disc", "round dot"],
    "square": ["square", "box", "block"],
    "triangle": ["triangle", "wedge", "three-sided shape"],
    "diamond": ["diamond", "rhombus", "tilted square"],
    "cross": ["cross", "plus sign", "X-like cross"],
    "ring": ["ring", "hoop", "hollow circle"],
}
MOTIONS = {
    "right": ["moves from left to right", "slides to the right", "drifts rightward"],
    "left": ["moves from right to left", "slides to the left", "drifts leftward"],
    "up": ["rises upward", "floats up", "climbs toward the top"],
    "down": ["falls downward", "sinks down", "drops toward the bottom"],
    "still": ["stays still in the middle", "rests at the centre", "sits motionless"],
    "orbit": ["circles around the centre", "spins in a loop", "travels in a circle"],
}
SIZES = {"small": (0.14, ["small", "little", "tiny"]), "large": (0.26, ["large", "big", "huge"])}
THEMES = [
    "Food",
    "Lifestyle",
    "Sports",
    "Cooking",
    "Gaming",
    "Travel",
    "Education",
    "Entertainment",
    "Music",
    "Science",
]
TEMPLATES = [
    "A {size} {colour} {shape} {motion} against a {bg} background.",
    "On a {bg} backdrop, a {colour} {shape} {motion}.",
    "The scene shows a {size} {shape} in {colour} that {motion} over a {bg} field.",
    "We see a {colour} {shape} that {motion}; the background is {bg}.",
    "Against {bg} scenery, a {size} {colour} {shape} {motion}.",
    "In this part a {shape}, {colour} and {size}, {motion} while the backdrop stays {bg}.",
]


@dataclass(frozen=True)
class EventSpec:
    """One event of the shared pool: its visual attributes and its fixed description."""

    event_id: str
    shape: str
    colour: str
    background: str
    motion: str
    size: str
    theme: str
    description: str
    partner_shape: str | None = None
    partner_colour: str | None = None
    partner_background: str | None = None
    verb: str | None = None

    @property
    def relational(self) -> bool:
        return self.verb is not None

    def partner_view(self) -> "EventSpec":
        """What the reverse shot of a relational event shows: the partner, large and still, in
        front of the other side of the room (another background, as a reverse angle does)."""
        assert self.partner_shape and self.partner_colour and self.partner_background
        return replace(
            self,
            shape=self.partner_shape,
            colour=self.partner_colour,
            background=self.partner_background,
            motion="still",
            size="large",
        )


@dataclass(frozen=True)
class SynthConfig:
    num_videos: int = 1200
    seed: int = 0
    size: int = 64
    fps: int = 8
    events_per_video: tuple[int, int] = (3, 5)
    occurrences: tuple[int, int] = (3, 6)
    event_seconds: tuple[float, float] = (2.0, 8.0)
    recur_prob: float = 0.15
    train_fraction: float = 0.7
    keyframe_seconds: float = 4.0
    relational_fraction: float = 0.0
    shot_seconds: tuple[float, float] = (0.75, 1.5)


def _describe(rng: np.random.Generator, shape: str, colour: str, background: str, motion: str, size: str) -> str:
    words = {
        "shape": rng.choice(SHAPES[shape]),
        "colour": rng.choice(COLOURS[colour][1]),
        "bg": rng.choice(BACKGROUNDS[background][1]),
        "motion": rng.choice(MOTIONS[motion]),
        "size": rng.choice(SIZES[size][1]),
    }
    return str(rng.choice(TEMPLATES)).format(**words)


RELATIONAL_VERBS = ["confronts", "talks to", "looks at", "hugs", "argues with", "fights", "speaks to", "kisses"]
RELATIONAL_TEMPLATES = [
    "The {colour} {shape} {verb} the {colour2} {shape2} against a {bg} background.",
    "On a {bg} backdrop, the {colour} {shape} {verb} the {colour2} {shape2}.",
    "A {colour} {shape} {verb} a {colour2} {shape2} in front of {bg} scenery.",
]
# The shape nouns play the characters of relational scenes: give them to the SALI span splitter
# as person words (`SpanSplitter.extra_person_words`) so these sentences count as relational.
CHARACTER_WORDS = sorted({name.split()[-1] for names in SHAPES.values() for name in names})


def _make_relational(event: EventSpec, rng: np.random.Generator) -> EventSpec:
    """`event` turned into an interaction with a second character (another shape and colour):
    filmed as alternating shot / reverse shot, described with an interpersonal verb (SALI Fig. 1)."""
    shape2 = str(rng.choice([s for s in SHAPES if s != event.shape]))
    colour2 = str(rng.choice([c for c in COLOURS if c != event.colour]))
    background2 = str(rng.choice([b for b in BACKGROUNDS if b != event.background]))
    verb = str(rng.choice(RELATIONAL_VERBS))
    words = {
        "shape": rng.choice(SHAPES[event.shape]),
        "colour": rng.choice(COLOURS[event.colour][1]),
        "shape2": rng.choice(SHAPES[shape2]),
        "colour2": rng.choice(COLOURS[colour2][1]),
        "bg": rng.choice(BACKGROUNDS[event.background][1]),
        "verb": verb,
    }
    description = str(rng.choice(RELATIONAL_TEMPLATES)).format(**words)
    return replace(
        event,
        size="large",
        description=description,
        partner_shape=shape2,
        partner_colour=colour2,
        partner_background=background2,
        verb=verb,
    )


def make_event_pool(num_events: int, rng: np.random.Generator, relational_fraction: float = 0.0) -> list[EventSpec]:
    """`num_events` distinct attribute combinations, each with a sentence (shape colour != bg);
    a `relational_fraction` of them become two-character interactions (`_make_relational`)."""
    combos = [(s, c, b, m, z) for s in SHAPES for c in COLOURS for b in BACKGROUNDS for m in MOTIONS for z in SIZES]
    if num_events > len(combos):
        raise ValueError(f"at most {len(combos)} distinct events, asked for {num_events}")
    picks = rng.permutation(len(combos))[:num_events]
    pool = []
    for k, index in enumerate(sorted(picks)):
        shape, colour, background, motion, size = combos[index]
        pool.append(
            EventSpec(
                event_id=f"ev_{k:05d}",
                shape=shape,
                colour=colour,
                background=background,
                motion=motion,
                size=size,
                theme=str(rng.choice(THEMES)),
                description=_describe(rng, shape, colour, background, motion, size),
            )
        )
    if relational_fraction > 0:
        chosen = rng.permutation(len(pool))[: round(relational_fraction * len(pool))]
        for k in sorted(chosen):
            pool[k] = _make_relational(pool[k], rng)
    return pool


def assign_events(
    counts: np.ndarray, pool_size: int, occurrences: tuple[int, int], rng: np.random.Generator
) -> list[list[int]]:
    """Deal pool events into videos so each event lands in about `occurrences` videos, distinct per video."""
    slots = np.concatenate([np.full(rng.integers(occurrences[0], occurrences[1] + 1), e) for e in range(pool_size)])
    total = int(counts.sum())
    if len(slots) < total:
        slots = np.concatenate([slots, rng.integers(0, pool_size, total - len(slots))])
    slots = list(rng.permutation(slots)[:total])
    videos = []
    for count in counts:
        chosen: list[int] = []
        scan = 0
        while len(chosen) < count:
            if scan < len(slots):
                if slots[scan] not in chosen:
                    chosen.append(int(slots.pop(scan)))
                    continue
                scan += 1
            else:  # only duplicates left: draw a fresh distinct event
                candidate = int(rng.integers(0, pool_size))
                if candidate not in chosen:
                    chosen.append(candidate)
        videos.append(chosen)
    return videos


def _shape_mask(shape: str, radius: int) -> np.ndarray:
    y, x = np.mgrid[-radius : radius + 1, -radius : radius + 1].astype(np.float32)
    r = float(radius)
    if shape == "circle":
        return x**2 + y**2 <= r**2
    if shape == "square":
        return (np.abs(x) <= 0.8 * r) & (np.abs(y) <= 0.8 * r)
    if shape == "triangle":
        return (y <= 0.8 * r) & (y >= -r + 2 * np.abs(x))
    if shape == "diamond":
        return np.abs(x) + np.abs(y) <= r
    if shape == "cross":
        return (np.abs(x) <= 0.3 * r) | (np.abs(y) <= 0.3 * r)
    if shape == "ring":
        return (x**2 + y**2 <= r**2) & (x**2 + y**2 >= (0.55 * r) ** 2)
    raise ValueError(f"unknown shape {shape!r}")


def _position(motion: str, progress: float, size: int, radius: int) -> tuple[float, float]:
    lo, hi, mid = radius + 1, size - radius - 2, size / 2
    if motion == "right":
        return mid, lo + (hi - lo) * progress
    if motion == "left":
        return mid, hi - (hi - lo) * progress
    if motion == "up":
        return hi - (hi - lo) * progress, mid
    if motion == "down":
        return lo + (hi - lo) * progress, mid
    if motion == "orbit":
        angle = 2 * math.pi * progress
        reach = (hi - lo) / 2
        return mid + reach * math.sin(angle), mid + reach * math.cos(angle)
    return mid, mid


def render_frame(event: EventSpec, progress: float, size: int) -> np.ndarray:
    """The frame of `event` at `progress` in [0, 1] of its interval, `[size, size, 3]` uint8."""
    frame = np.empty((size, size, 3), dtype=np.uint8)
    frame[:] = BACKGROUNDS[event.background][0]
    radius = max(2, round(SIZES[event.size][0] * size))
    mask = _shape_mask(event.shape, radius)
    cy, cx = _position(event.motion, progress, size, radius)
    top, left = round(cy) - radius, round(cx) - radius
    y0, x0 = max(0, top), max(0, left)
    y1, x1 = min(size, top + mask.shape[0]), min(size, left + mask.shape[1])
    region = frame[y0:y1, x0:x1]
    region[mask[y0 - top : y1 - top, x0 - left : x1 - left]] = COLOURS[event.colour][0]
    return frame


@dataclass(frozen=True)
class _VideoJob:
    path: str
    segments: list[tuple[EventSpec, float, float]]  # (event, start, end) in play order
    size: int
    fps: int
    keyframe_seconds: float


def write_video(job: _VideoJob) -> str:
    """Render and encode one video with PyAV (H.264, yuv420p)."""
    duration = job.segments[-1][2]
    num_frames = round(duration * job.fps)
    tmp = job.path + ".part.mp4"
    with av.open(tmp, mode="w") as container:
        stream = container.add_stream("libx264", rate=job.fps)
        stream.width = stream.height = job.size
        stream.pix_fmt = "yuv420p"
        stream.options = {"preset": "veryfast", "g": str(max(1, round(job.keyframe_seconds * job.fps))), "crf": "18"}
        segment = 0
        for k in range(num_frames):
            t = k / job.fps
            while segment + 1 < len(job.segments) and t >= job.segments[segment][2] - 1e-9:
                segment += 1
            event, start, end = job.segments[segment]
            rgb = render_frame(event, (t - start) / (end - start), job.size)
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    os.replace(tmp, job.path)
    return job.path


def _plan_segments(
    events: list[EventSpec], cfg: SynthConfig, rng: np.random.Generator
) -> list[tuple[EventSpec, float, float]]:
    """Event intervals in play order, on the frame grid; maybe the first event again at the end."""
    order = list(events)
    if rng.random() < cfg.recur_prob:
        order.append(events[0])
    segments, t = [], 0.0
    for event in order:
        seconds = rng.uniform(*cfg.event_seconds)
        length = max(2, round(seconds * cfg.fps)) / cfg.fps
        if event.relational:
            segments.extend(_alternating_shots(event, t, t + length, cfg, rng))
        else:
            segments.append((event, t, t + length))
        t += length
    return segments


def _alternating_shots(
    event: EventSpec, start: float, end: float, cfg: SynthConfig, rng: np.random.Generator
) -> list[tuple[EventSpec, float, float]]:
    """A relational event cut into shot / reverse shot (subject, partner, subject, ...), at least
    two shots; every shot lasts at least `cfg.shot_seconds[0]` (the remainder joins the last shot)."""
    frames = round((end - start) * cfg.fps)
    shortest = max(1, round(cfg.shot_seconds[0] * cfg.fps))
    cuts = [0]
    while True:
        step = max(1, round(rng.uniform(*cfg.shot_seconds) * cfg.fps))
        if cuts[-1] + step + shortest > frames:
            break
        cuts.append(cuts[-1] + step)
    if len(cuts) < 2:
        cuts.append(max(1, frames // 2))
    cuts.append(frames)
    views = [event, event.partner_view()]
    return [(views[k % 2], start + a / cfg.fps, start + b / cfg.fps) for k, (a, b) in enumerate(zip(cuts, cuts[1:]))]


SETTINGS_FILE = "synthetic.json"


def settings_differences(folder: str | Path, cfg: SynthConfig) -> str | None:
    """How the settings recorded in `folder`'s synthetic.json differ from `cfg` (None when they agree, or when
    the folder records none: a corpus written before the file existed)."""
    path = Path(folder) / SETTINGS_FILE
    if not path.is_file():
        return None
    wanted, found = json.loads(json.dumps(asdict(cfg))), json.loads(path.read_text())
    differing = sorted(k for k in wanted.keys() | found.keys() if wanted.get(k) != found.get(k))
    shown = ", ".join(f"{k} {found.get(k)!r} there, {wanted.get(k)!r} asked" for k in differing)
    return f"{path}: written with other settings ({shown})" if differing else None


def generate_corpus(
    out: str | Path, cfg: SynthConfig = SynthConfig(), workers: int | None = None, progress: bool = True
) -> Path:
    """Write `cfg.num_videos` mp4 files and `annotations.json` / `events.json` under `out`.

    Returns the annotation path. The settings go first, to `synthetic.json`: videos already present
    (complete files) are not re-encoded, so an interrupted run resumes, and a folder written with other
    settings is refused (the same file name holds another video under other settings, so keeping it would
    pair one corpus's videos with another's annotations).
    """
    out = Path(out)
    differences = settings_differences(out, cfg)
    if differences:
        raise ValueError(f"{differences}; write the corpus to another folder, or delete {out} to rewrite it")
    (out / "videos").mkdir(parents=True, exist_ok=True)
    (out / SETTINGS_FILE).write_text(json.dumps(asdict(cfg), indent=1))
    rng = np.random.default_rng(cfg.seed)
    counts = rng.integers(cfg.events_per_video[0], cfg.events_per_video[1] + 1, cfg.num_videos)
    mean_occurrence = sum(cfg.occurrences) / 2
    pool = make_event_pool(
        max(cfg.events_per_video[1], math.ceil(counts.sum() / mean_occurrence)), rng, cfg.relational_fraction
    )
    assignment = assign_events(counts, len(pool), cfg.occurrences, rng)
    is_train = np.zeros(cfg.num_videos, dtype=bool)
    is_train[rng.permutation(cfg.num_videos)[: round(cfg.train_fraction * cfg.num_videos)]] = True

    records, jobs = [], []
    for v, members in enumerate(assignment):
        video_id = f"syn_{v:05d}"
        rel = f"videos/{video_id}.mp4"
        segments = _plan_segments([pool[e] for e in members], cfg, rng)
        intervals: dict[str, list[tuple[float, float]]] = {}
        for event, start, end in segments:
            spans = intervals.setdefault(event.event_id, [])
            if spans and abs(spans[-1][1] - start) < 1e-9:  # the next shot of one relational event
                spans[-1] = (spans[-1][0], end)
            else:
                spans.append((start, end))
        by_id = {e.event_id: e for e, _, _ in segments}
        records.append(
            VideoRecord(
                video_id=video_id,
                path=rel,
                duration=segments[-1][2],
                split="train" if is_train[v] else "test",
                events=tuple(Event(by_id[i].description, tuple(iv), by_id[i].theme, i) for i, iv in intervals.items()),
                cuts=tuple(end for _, _, end in segments[:-1]),
            )
        )
        if not (out / rel).is_file():
            jobs.append(_VideoJob(str(out / rel), segments, cfg.size, cfg.fps, cfg.keyframe_seconds))

    workers = workers or min(len(jobs), os.cpu_count() or 1) or 1
    written = cfg.num_videos - len(jobs)  # complete files of an earlier run
    with Progress("writing videos", cfg.num_videos, completed=written, enabled=progress) as bar:
        if workers == 1:
            for job in jobs:
                write_video(job)
                bar.advance()
        else:
            with ProcessPoolExecutor(workers) as pool_exec:
                for _ in pool_exec.map(write_video, jobs, chunksize=8):
                    bar.advance()

    (out / "events.json").write_text(json.dumps([asdict(e) for e in pool], indent=1))
    annotation = out / "annotations.json"
    save_annotations(records, annotation)
    return annotation
