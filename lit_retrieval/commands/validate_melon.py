"""`lit-retrieval validate-melon ANNOTATION... [--videos DIR] [--json]`: check a MELON-format
annotation against the paper's construction rules and list every violation (nothing is filtered).

Rules (MELON Sec. 3 and supp. C.1): each video has 3 to 5 events ("K ranges from 3 to 5") that do
not overlap ("3 to 5 non-overlapping events"), and is at least 2 minutes long ("we strictly remove
videos shorter than 2 minutes"). Records the parser (`lit_retrieval.data.datasets.melon`) refuses (missing
timestamps, broken descriptions, duplicate ids) are listed too (supp. C.1 "annotation
completeness"). With `--videos`, every video file must exist and its own length (container header)
must also reach the minimum. Touching intervals (one ends where the next starts) do not overlap.
With `--t2t THRESHOLD` (MELON supp. C.2, 0.70 in the paper), adjacent event descriptions whose
cosine similarity under the packaged all-MiniLM-L6-v2 (`--t2t-model`) exceeds the threshold are
listed too (rule `t2t`): the filter `build-melon` applies, by the same function.

Each ANNOTATION is a file whose records carry a split field, or `SPLIT=FILE` for a file per split.
Exit status: 0 when nothing is violated, 1 when something is, 2 when a file cannot be read at all.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.melon import MelonParser
from lit_retrieval.data.records import AnnotationError, VideoRecord
from lit_retrieval.data.media.video import VideoDecodeError, video_duration
from lit_retrieval.errors import UsageError
from lit_retrieval.melon_build.config import T2TConfig


@dataclass(frozen=True)
class MelonRules:
    """The construction rules checked (MELON's values by default)."""

    min_events: int = 3
    max_events: int = 5
    min_seconds: float = 120.0
    t2t_threshold: float | None = None  # supp. C.2's 0.70; None: not checked

    def __post_init__(self) -> None:
        """Refuse rules that would silently pass everything (a NaN compares false) or nothing."""
        if self.min_events < 1 or self.min_events > self.max_events:
            raise UsageError("--min-events", f"{self.min_events} must lie in [1, --max-events {self.max_events}]")
        if not math.isfinite(self.min_seconds) or self.min_seconds < 0:
            raise UsageError("--min-seconds", f"must be a finite number >= 0, got {self.min_seconds}")
        if self.t2t_threshold is not None and not -1 <= self.t2t_threshold <= 1:  # NaN fails too
            raise UsageError("--t2t", f"must be a cosine similarity in [-1, 1], got {self.t2t_threshold}")


@dataclass(frozen=True)
class Violation:
    """One broken rule: the annotation file, the video (`-`: the file), the rule and why."""

    source: str
    record: str
    rule: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: record {self.record!r}: [{self.rule}] {self.reason}"


def overlaps(video: VideoRecord) -> list[tuple[int, int, tuple[float, float], tuple[float, float]]]:
    """Pairs of events (i < j) with intervals that share more than a point, and those intervals."""
    found = []
    for i, first in enumerate(video.events):
        for j in range(i + 1, len(video.events)):
            pairs = [(a, b) for a in first.intervals for b in video.events[j].intervals]
            hit = next(((a, b) for a, b in pairs if min(a[1], b[1]) > max(a[0], b[0])), None)
            if hit is not None:
                found.append((i, j, *hit))
    return found


def video_violations(video: VideoRecord, source: str, rules: MelonRules, video_root: Path | None) -> list[Violation]:
    """Every rule `video` breaks (file checks only with `video_root`)."""
    found: list[tuple[str, str]] = []  # (rule, reason)
    count = len(video.events)
    if not rules.min_events <= count <= rules.max_events:
        found.append(("events", f"{count} events; {rules.min_events}-{rules.max_events} needed"))
    if video.duration < rules.min_seconds:
        found.append(("duration", f"annotated duration {video.duration:g} s < {rules.min_seconds:g} s"))
    for i, j, a, b in overlaps(video):
        found.append(("overlap", f"events {i} [{a[0]:g}, {a[1]:g}] and {j} [{b[0]:g}, {b[1]:g}] overlap"))
    if video_root is not None:
        try:
            seconds = video_duration(video_root / video.path)
        except VideoDecodeError as err:
            found.append(("video", f"{err.path}: {err.reason}"))
        else:
            if seconds < rules.min_seconds:
                found.append(("video_duration", f"{video.path} lasts {seconds:g} s < {rules.min_seconds:g} s"))
    return [Violation(source, video.video_id, rule, reason) for rule, reason in found]


def t2t_violations(videos: list[tuple[VideoRecord, str]], threshold: float, model: str) -> list[Violation]:
    """Adjacent descriptions more similar than `threshold` (MELON supp. C.2), per video."""
    from lit_retrieval.melon_build.filters import redundant_pairs, sentence_encoder

    encoder = sentence_encoder(model)
    found = []
    for video, source in videos:
        similarities = encoder.adjacent_similarities(video.descriptions)
        for i, score in redundant_pairs(similarities, threshold):
            reason = f"events {i} and {i + 1}: description similarity {score:.3f} > {threshold:g}"
            found.append(Violation(source, video.video_id, "t2t", reason))
    return found


def validate(
    files: dict[str | None, Path], rules: MelonRules, video_root: Path | None, t2t_model: str = T2TConfig.model
) -> dict:
    """The report: counts per split and per event count, and every violation."""
    prober = (lambda path: video_duration(video_root / path)) if video_root is not None else None
    parser = MelonParser(duration_of=prober)
    videos, violations, seen = [], [], {}
    for split, path in files.items():
        collector = RecordCollector("skip")
        for video in parser.load(path, split, collector):
            if video.video_id in seen:
                duplicate = f"video id also in {seen[video.video_id]}"
                violations.append(Violation(str(path), video.video_id, "duplicate", duplicate))
                continue
            seen[video.video_id] = str(path)
            videos.append((video, str(path)))
            violations.extend(video_violations(video, str(path), rules, video_root))
        violations.extend(Violation(e.source, e.record, "record", e.reason) for e in collector.dropped)
    if rules.t2t_threshold is not None:
        violations.extend(t2t_violations(videos, rules.t2t_threshold, t2t_model))
    videos = [video for video, _ in videos]
    return {
        "videos": len(videos),
        "splits": dict(sorted(Counter(v.split for v in videos).items())),
        "events_per_video": {str(k): n for k, n in sorted(Counter(len(v.events) for v in videos).items())},
        "rules": asdict(rules),
        "violations": [asdict(v) for v in violations],
        "by_rule": dict(sorted(Counter(v.rule for v in violations).items())),
    }


def _file_argument(text: str) -> tuple[str | None, Path]:
    split, sep, path = text.partition("=")
    return (split, Path(path)) if sep and split and not Path(text).exists() else (None, Path(text))


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="lit-retrieval validate-melon", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("annotation", nargs="+", help="MELON-format JSON file, or SPLIT=FILE")
    parser.add_argument(
        "--videos",
        type=Path,
        help="video folder: check each file exists and is long enough (and probe missing durations)",
    )
    parser.add_argument("--min-events", type=int, default=MelonRules.min_events)
    parser.add_argument("--max-events", type=int, default=MelonRules.max_events)
    parser.add_argument("--min-seconds", type=float, default=MelonRules.min_seconds, help="shortest allowed video (s)")
    parser.add_argument(
        "--t2t",
        type=float,
        metavar="THRESHOLD",
        help="also list adjacent descriptions more similar than this (MELON supp. C.2: 0.70)",
    )
    parser.add_argument("--t2t-model", default=T2TConfig.model, help="sentence encoder folder or package:MODULE")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON object")
    args = parser.parse_args(argv)
    files = dict(_file_argument(a) for a in args.annotation)
    if len(files) != len(args.annotation):
        parser.error("each split (or the split-less file) may be given once")
    if args.videos is not None and not args.videos.is_dir():
        parser.error(f"--videos {args.videos}: not a folder")
    try:
        rules = MelonRules(args.min_events, args.max_events, args.min_seconds, args.t2t)
        report = validate(files, rules, args.videos, args.t2t_model)
    except AnnotationError as err:  # a file that cannot be read at all
        parser.error(str(err))
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['videos']} videos {report['splits']}; events per video {report['events_per_video']}")
        for violation in report["violations"]:
            print(Violation(**violation))
        print(
            f"{len(report['violations'])} violation(s) {report['by_rule']}" if report["violations"] else "no violations"
        )
    return 1 if report["violations"] else 0
