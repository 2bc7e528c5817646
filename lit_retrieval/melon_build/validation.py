"""MELON's construction rules applied to a MELON-format annotation (`lit-retrieval validate-melon`,
and `build-melon`'s final check): the per-video rules of `lit_retrieval.data.formats.melon`
(`MelonRules`, MELON Sec. 3 and supp. C.1), duplicate ids across files, records the parser refuses,
and, with a threshold, supp. C.2's T2T similarity of adjacent descriptions (the filter
`build-melon` applies, by the same function)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict
from pathlib import Path

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.formats.melon import MelonParser, MelonRules, Violation, video_violations
from lit_retrieval.data.media.video import video_duration
from lit_retrieval.data.records import VideoRecord
from lit_retrieval.melon_build.config import T2TConfig


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
