"""docs/gve.md's task-file example, copied from the page: the task reader (`data/gve/tasks.py`) reads its records
and its config entry as documented (items, windows, negatives, media paths from `media_root`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from lit_retrieval.data.gve.tasks import TaskSpec, read_task
from helpers.doc_commands import fenced_block


def test_the_documented_task_file_and_entry_read_as_described(tmp_path):
    lines = fenced_block("docs/gve.md", "jsonl", "**Task files**")
    (entry,) = yaml.safe_load(fenced_block("docs/gve.md", "yaml", "**Task files**"))
    task = tmp_path / entry["path"]
    task.parent.mkdir(parents=True)
    task.write_text(lines)
    media = tmp_path / entry["media_root"]
    spec = TaskSpec(**{**entry, "path": str(task), "media_root": str(media)})
    records = read_task(spec)
    assert [r.record_id for r in records][0] == "msrvtt-7" and len(records) == 2
    first, second = records
    assert first.query.text == "a man rides a horse" and Path(first.positive.video) == media / "videos" / "video7.mp4"
    assert second.query.text == "a horse gallops on a beach"  # a plain string is text
    assert (second.positive.start, second.positive.end) == (2.0, 9.5)
    assert [(n.video, n.start, n.end) for n in second.negatives] == [(str(media / "videos" / "video9.mp4"), 0.0, 4.0)]
    assert spec.format == "T->V" and spec.num_negatives == 1 and spec.batch_size == 8
