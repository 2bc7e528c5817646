"""Stage `write`: the MELON-format annotation, the statistics (JSON + a Markdown page with PNG
figures) and the V2T similarity histograms of a finished build.

Files under OUT:
    annotations.json            MELON format (lit_retrieval/data/datasets/melon.py): {"videos": [{video_id,
                                path, duration, split, summary_method, events: [{theme, description,
                                timestamp: [start, end]}]}]}, videos in id order
    stats.json, stats.md        counts per source and stage (Tab. 8, Tab. 9), events per query,
                                video lengths, splits, LLM calls per stage, failures
    figures/*.png               events per query, video lengths, V2T similarities per source
    removals.jsonl              every removed video: stage, source, video, reason, detail
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

LENGTH_EDGES_MIN = (2, 5, 10, 30, 60)  # minutes; MELON Fig. 3(d) reports 2-10 min and > 60 min shares


def melon_record(uid: str, path: str, duration: float, split: str, events: list[dict], video_root: str) -> dict:
    """One video of the output annotation (paths relative to `video_root`, times to the millisecond)."""
    return {
        "video_id": uid,
        "path": os.path.relpath(path, video_root),
        "duration": round(duration, 3),
        "split": split,
        "summary_method": sorted({e["method"] for e in events})[0] if events else "",
        "events": [
            {
                "theme": e["theme"],
                "description": e["description"],
                "timestamp": [round(e["start"], 3), round(e["end"], 3)],
            }
            for e in events
        ],
    }


def _histogram(path: Path, values: list[float], bins: Any, title: str, xlabel: str, line: float | None = None) -> None:
    import matplotlib  # here, not at the top: `build-melon --help` stays light

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.2))
    axis.hist(values, bins=bins, color="#4c72b0", edgecolor="white")
    if line is not None:
        axis.axvline(line, color="#c44e52", linestyle="--", label=f"threshold {line:g}")
        axis.legend()
    axis.set_title(title)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("count")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def length_bucket(seconds: float) -> str:
    """The video-length bucket (minutes) of `seconds`, e.g. `2-5 min`, `60+ min`."""
    minutes = seconds / 60
    edges = LENGTH_EDGES_MIN
    if minutes < edges[0]:
        return f"<{edges[0]} min"
    low, high = next(((a, b) for a, b in zip(edges, edges[1:]) if minutes < b), (edges[-1], None))
    return f"{low}+ min" if high is None else f"{low}-{high} min"


def statistics(records: list[dict], state: Any, thresholds: dict[str, float], llm: dict, this_run: dict) -> dict:
    """The figures of the page (also written as stats.json): `llm` the calls per stage over the
    whole build, `this_run` the chat client's figures (cache hits, retries, failures) of this run."""
    removed: Counter = Counter((r["stage"], r["source"]) for r in state.removals)
    reasons: Counter = Counter((r["stage"], r["reason"]) for r in state.removals)
    sources = list(state.collect_counts)
    v2t = {}
    for source in sources:
        scores = state.v2t_scores.get(source, [])
        dropped = state.segment_removals[("v2t", source)]
        v2t[source] = {
            "threshold": thresholds[source],
            "segments": len(scores),
            "removed": dropped,
            "kept_pct": round(100 * (1 - dropped / len(scores)), 1) if scores else 0.0,
        }
    return {
        "videos": len(records),
        "splits": dict(sorted(Counter(r["split"] for r in records).items())),
        "events": sum(len(r["events"]) for r in records),
        "events_per_query": {str(k): n for k, n in sorted(Counter(len(r["events"]) for r in records).items())},
        "video_length": dict(sorted(Counter(length_bucket(r["duration"]) for r in records).items())),
        "summary_method": dict(Counter(r["summary_method"] for r in records)),
        "collect": state.collect_counts,
        "removed_videos": {f"{stage}/{source}": n for (stage, source), n in sorted(removed.items())},
        "removal_reasons": {f"{stage}/{reason}": n for (stage, reason), n in sorted(reasons.items())},
        "v2t": v2t,
        "failures": state.failures,
        "llm": llm,
        "llm_this_run": this_run,
    }


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def write_page(out: Path, stats: dict, state: Any, records: list[dict], stage_order: tuple[str, ...]) -> None:
    """stats.json, stats.md and the figures (removal columns in `stage_order`)."""
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    counts = [len(r["events"]) for r in records]
    _histogram(
        figures / "events_per_query.png",
        counts,
        bins=[x - 0.5 for x in range(1, 8)],
        title="Events per query",
        xlabel="events",
    )
    _histogram(
        figures / "video_length.png",
        [r["duration"] / 60 for r in records],
        bins=20,
        title="Video length",
        xlabel="minutes",
    )
    for source, row in stats["v2t"].items():
        _histogram(
            figures / f"v2t_{source}.png",
            state.v2t_scores.get(source, []),
            bins=40,
            title=f"V2T similarity: {source}",
            xlabel="cosine similarity",
            line=row["threshold"],
        )
    (out / "stats.json").write_text(json.dumps(stats, indent=1), encoding="utf-8")
    collect = [[s, c["raw"], c["kept"], f"{100 * c['ratio']:.2f}%"] for s, c in stats["collect"].items()]
    stages = [s for s in stage_order if any(k.startswith(f"{s}/") for k in stats["removed_videos"])]
    removed = [
        [s, *(stats["removed_videos"].get(f"{stage}/{s}", 0) for stage in stages), stats["v2t"][s]["removed"]]
        for s in stats["collect"]
    ]
    v2t = [[s, r["threshold"], r["segments"], r["kept_pct"]] for s, r in stats["v2t"].items()]
    llm = [[stage, r["videos"], r["calls"], r["calls_per_video"]] for stage, r in stats["llm"].items()]
    retries = {stage: r["retries"] for stage, r in stats["llm_this_run"].items() if r["retries"]}
    page = [
        "# MELON build statistics",
        f"{stats['videos']} videos {stats['splits']}, {stats['events']} events; summaries: {stats['summary_method']}",
        "## Collect (MELON Tab. 8)",
        _table(["source", "raw videos", "kept", "ratio"], collect),
        "## Removals per stage and source (videos; last column: V2T segments)",
        _table(["source", *stages, "v2t segments"], removed),
        "Reasons: " + ", ".join(f"{k}: {n}" for k, n in stats["removal_reasons"].items()),
        "## V2T filtering (MELON Tab. 9)",
        _table(["source", "threshold", "segments", "kept (%)"], v2t),
        *[f"![V2T {s}](figures/v2t_{s}.png)" for s in stats["v2t"]],
        "## Events per query",
        _table(["events", "videos"], list(stats["events_per_query"].items())),
        "![events per query](figures/events_per_query.png)",
        "## Video length",
        _table(["length", "videos"], list(stats["video_length"].items())),
        "![video length](figures/video_length.png)",
        "## LLM calls (every run and shard of this build; retried attempts included)",
        _table(["stage", "videos", "calls", "calls per video"], llm) if llm else "none",
        "Retries in this run: " + (", ".join(f"{s}: {r}" for s, r in retries.items()) or "none"),
        "## Failures (rerun to retry)",
        "\n".join(f"- {f['stage']}: {f['video']}: {f['reason']}" for f in stats["failures"]) or "none",
    ]
    (out / "stats.md").write_text("\n\n".join(page) + "\n", encoding="utf-8")
    with (out / "removals.jsonl").open("w", encoding="utf-8") as handle:
        for removal in state.removals:
            handle.write(json.dumps(removal) + "\n")
