"""GVE training tasks made from the synthetic multi-event corpus (the offline stand-in for UVRD).

From each corpus video and event (GVE Sec. 3.2's "multimodal task extension", on our own data):

- `syn_t2v` T->V: the event's description -> the event's clip; hard negative: another event's clip
  of the same video. Treated as collected caption data (kept by the GVE-i ablation).
- `syn_t2i` T->I: description -> a frame from the middle of the event (PNG).
- `syn_i2v` I->V: that frame -> the whole video (MSRVTT-I2V style).
- `syn_v2v` V->V: the event's clip -> the whole video (LoVR-C2V style).
- `syn_tv2v` TV->V: a clip of one event plus "then: <next event's description>" -> the clip of
  both events; hard negative: the first event's clip alone.

All but `syn_t2v` are marked synthetic. Train files come from the corpus' train videos, val files
from its test videos. Media paths in the JSONL files are relative to the file's folder.

The val pairs are also written as a held-out evaluation suite for `lit-retrieval uvrb`
(`eval/<task>/{corpus,queries,qrels}.jsonl` and the task list `eval/tasks.yaml`): each task's corpus
is its distinct targets (the whole test video is the target of all its events' I->V and V->V
queries), its prompt the training instruction, and its `ability` the UVRB task type its query
modalities make it (GVE Sec. 3.1): TXT for text queries (T->V, T->I), CMP for text with a video
(TV->V), VIS for visual queries (I->V, V->V).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import yaml
from PIL import Image

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.items import parse_format
from lit_retrieval.data.records import VideoRecord
from lit_retrieval.data.gve.tasks import TaskSpec, write_task
from lit_retrieval.data.media.video import sample_frames

TASKS = {  # name: (format, hard negatives, synthetic, query instruction)
    "syn_t2v": ("T->V", 1, False, "Find the video clip according to the text description."),
    "syn_t2i": ("T->I", 0, True, "Find the image according to the text description."),
    "syn_i2v": ("I->V", 0, True, "Find the video according to the image."),
    "syn_v2v": ("V->V", 0, True, "Find the original long video according to the short video clip."),
    "syn_tv2v": ("TV->V", 1, True, "Find the video clip that continues the given video as the text describes."),
}
ABILITY = {"syn_t2v": "TXT", "syn_t2i": "TXT", "syn_i2v": "VIS", "syn_v2v": "VIS", "syn_tv2v": "CMP"}


def _records(video: VideoRecord, corpus: Path, frames_dir: Path, base: Path) -> dict[str, list[dict]]:
    def rel(path: Path) -> str:
        return os.path.relpath(path, base)

    video_path = corpus / video.path
    whole = {"video": rel(video_path)}
    events = sorted(video.events, key=lambda e: e.intervals[0][0])
    clips = [{"video": rel(video_path), "start": e.intervals[0][0], "end": e.intervals[0][1]} for e in events]
    out: dict[str, list[dict]] = {name: [] for name in TASKS}
    for i, event in enumerate(events):
        start, end = event.intervals[0]
        frame = sample_frames(video_path, 1, start, end).frames[0]
        image_path = frames_dir / f"{video.video_id}_{i}.png"
        Image.fromarray(frame).save(image_path)
        image = {"image": rel(image_path)}
        rid = f"{video.video_id}/{i}"
        other = clips[(i + 1) % len(clips)]
        out["syn_t2v"].append(
            {"id": rid, "query": {"text": event.description}, "positive": clips[i], "negatives": [other]}
        )
        out["syn_t2i"].append({"id": rid, "query": {"text": event.description}, "positive": image})
        out["syn_i2v"].append({"id": rid, "query": image, "positive": whole})
        out["syn_v2v"].append({"id": rid, "query": clips[i], "positive": whole})
        if i + 1 < len(events):
            both = {"video": rel(video_path), "start": start, "end": events[i + 1].intervals[0][1]}
            query = {**clips[i], "text": f"then: {events[i + 1].description}"}
            out["syn_tv2v"].append({"id": rid, "query": query, "positive": both, "negatives": [clips[i]]})
    return out


def make_gve_tasks(corpus: str | Path, out: str | Path, batch_size: int = 8) -> dict[str, list[TaskSpec]]:
    """Write `out/{train,val}/<task>.jsonl` and `out/frames/*.png`; returns the task specs by split."""
    corpus, out = Path(corpus), Path(out)
    videos = load_annotations(corpus / "annotations.json")
    (out / "frames").mkdir(parents=True, exist_ok=True)
    specs: dict[str, list[TaskSpec]] = {}
    for split, source in (("train", "train"), ("val", "test")):
        base = out / split
        base.mkdir(parents=True, exist_ok=True)
        rows: dict[str, list[dict]] = {name: [] for name in TASKS}
        for video in (v for v in videos if v.split == source):
            for name, records in _records(video, corpus, out / "frames", base).items():
                rows[name].extend(records)
        specs[split] = []
        for name, (fmt, negatives, synthetic, instruction) in TASKS.items():
            parse_format(fmt)
            if rows[name]:
                path = write_task(base / f"{name}.jsonl", rows[name])
                specs[split].append(
                    TaskSpec(name, str(path), fmt, batch_size, negatives, instruction, synthetic=synthetic)
                )
        if split == "val":
            write_eval_tasks(rows, base, out / "eval")
    return specs


def _rebased(item: dict, base: Path, root: Path) -> dict:
    """`item` with its media paths (relative to `base`) made relative to `root`."""
    return {k: os.path.relpath(base / v, root) if k in ("image", "video") else v for k, v in item.items()}


def write_eval_tasks(rows: dict[str, list[dict]], base: Path, out: Path) -> Path:
    """The val pairs as corpus / queries / qrels task folders and their task list (module notes)."""
    entries = []
    for name, records in rows.items():
        if not records:
            continue
        root = out / name
        root.mkdir(parents=True, exist_ok=True)
        corpus: dict[str, str] = {}  # a target's JSON -> its corpus id
        queries, qrels = [], []
        for record in records:
            target = json.dumps(_rebased(record["positive"], base, root), sort_keys=True)
            corpus_id = corpus.setdefault(target, f"c{len(corpus)}")
            queries.append({"id": record["id"], **_rebased(record["query"], base, root)})
            qrels.append({"query_id": record["id"], "corpus_id": corpus_id, "score": 1})
        write_task(root / "corpus.jsonl", [{"id": cid, **json.loads(t)} for t, cid in corpus.items()])
        write_task(root / "queries.jsonl", queries)
        write_task(root / "qrels.jsonl", qrels)
        entries.append({"name": name, "dir": name, "prompt": TASKS[name][3], "ability": ABILITY[name]})
    path = out / "tasks.yaml"
    # task dirs are read relative to `root` (`lit-retrieval uvrb --root` overrides it): `out` as given
    path.write_text(yaml.safe_dump({"root": str(out), "tasks": entries}, sort_keys=False))
    return path


def summary(specs: dict[str, list[TaskSpec]]) -> str:
    lines = []
    for split, tasks in specs.items():
        for spec in tasks:
            count = sum(1 for _ in open(spec.path, encoding="utf-8"))
            lines.append(f"{split:5s} {spec.name:9s} {spec.format:6s} {count:6d} pairs  {spec.path}")
    return "\n".join(lines)
