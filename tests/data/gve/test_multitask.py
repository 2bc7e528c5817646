"""GVE task files, the task batch sampler, the multi-task data module and the synthetic tasks."""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace

import pytest
import torch

from helpers.gve_embedder import processing  # noqa: F401 (a fixture)
from lit_retrieval.data.items import parse_format
from lit_retrieval.data.gve.multitask import MultiTaskDataModule, content_key
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.data.batching.samplers import TaskBatchSampler
from lit_retrieval.data.gve.tasks import TaskSpec, read_task, write_task


def test_parse_format():
    assert parse_format("T->V") == ("T", "V")
    assert parse_format("it → tv") == ("TI", "TV")
    for bad in ("T", "TX->V", "TT->V", "->V"):
        with pytest.raises(ValueError):
            parse_format(bad)


def write_lines(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return path


def test_task_file_is_checked_against_its_format(tmp_path):
    good = {
        "id": "a",
        "query": "a cat",
        "positive": {"video": "v.mp4", "start": 1, "end": 3},
        "negatives": [{"video": "w.mp4"}, {"video": "x.mp4"}],
    }
    path = write_lines(
        tmp_path / "t.jsonl",
        [good, {"query": {"text": "b"}, "positive": {"video": "y.mp4"}, "negatives": [{"video": "z.mp4"}]}],
    )
    records = read_task(TaskSpec("t2v", str(path), "T->V", num_negatives=1))
    assert [r.record_id for r in records] == ["a", "2"]
    assert records[0].positive.video == str(tmp_path / "v.mp4") and records[0].positive.start == 1.0
    assert len(records[0].negatives) == 1  # the first num_negatives are used
    cases = {
        "not valid JSON": "{oops",
        "query is TV but task": {
            "query": {"text": "a", "video": "v.mp4"},
            "positive": {"video": "v.mp4"},
            "negatives": [{"video": "w.mp4"}],
        },
        "0 negatives": {"query": "a", "positive": {"video": "v.mp4"}},
        "need a 'video'": {
            "query": {"text": "a", "start": 1},
            "positive": {"video": "v.mp4"},
            "negatives": [{"video": "w.mp4"}],
        },
        "negative 0 is T": {"query": "a", "positive": {"video": "v.mp4"}, "negatives": ["text"]},
    }
    for reason, line in cases.items():
        bad = write_lines(tmp_path / "bad.jsonl", [good, line])
        with pytest.raises(AnnotationError, match=rf"bad.jsonl.*line 2.*{reason}"):
            read_task(TaskSpec("t2v", str(bad), "T->V", num_negatives=1))
    bad = write_lines(tmp_path / "mixed.jsonl", [good, "{oops", good])
    assert len(read_task(TaskSpec("t2v", str(bad), "T->V", num_negatives=1), on_bad_record="skip")) == 2


def test_subsampling_and_repetition(tmp_path):
    path = write_task(tmp_path / "t.jsonl", [{"id": str(i), "query": f"q{i}", "positive": f"p{i}"} for i in range(20)])
    sub = read_task(TaskSpec("t", str(path), "T->T", max_records=5), seed=1)
    assert len(sub) == 5 and len({r.record_id for r in sub}) == 5
    assert [r.record_id for r in read_task(TaskSpec("t", str(path), "T->T", max_records=5), seed=1)] == [
        r.record_id for r in sub
    ]
    assert len(read_task(TaskSpec("t", str(path), "T->T", repeat=3))) == 60


def test_sampler_one_task_per_batch_rank_slices_and_probabilities():
    sizes, batch_sizes = [50, 30, 20], [4, 3, 2]
    ranks = [
        TaskBatchSampler(
            sizes, batch_sizes, steps_per_epoch=400, probabilities=[0.6, 0.3, 0.1], seed=7, rank=r, world_size=2
        )
        for r in range(2)
    ]
    for sampler in ranks:
        sampler.set_epoch(3)
    batches = [list(s) for s in ranks]
    tasks = Counter()
    for left, right in zip(*batches):
        task = left[0][0]
        assert all(t == task for t, _ in left + right)  # same task on both ranks, never mixed
        assert len(left) == batch_sizes[task] and not {i for _, i in left} & {i for _, i in right}
        tasks[task] += 1
    assert [tasks[k] / 400 for k in range(3)] == pytest.approx([0.6, 0.3, 0.1], abs=0.06)
    # within a task, global batches walk a permutation in whole batches: 6 x 8 distinct records per pass
    first_pass = [
        i for left, right in zip(*batches) if left[0][0] == 0 for i in [x for _, x in left] + [x for _, x in right]
    ][:48]
    assert len(set(first_pass)) == 48
    with pytest.raises(ValueError, match="fewer records than one global batch"):
        TaskBatchSampler([5], [3], world_size=2)


def test_sampler_start_step_resumes_the_epoch_exactly():
    full = TaskBatchSampler([40, 17], [3, 2], probabilities=[0.5, 0.5], seed=2, world_size=1)
    full.set_epoch(1)
    everything = list(full)
    resumed = TaskBatchSampler([40, 17], [3, 2], probabilities=[0.5, 0.5], seed=2, world_size=1)
    resumed.set_epoch(1)
    resumed.start_step = 5
    assert list(resumed) == everything[5:]
    assert list(resumed) == everything  # start_step applies to one pass only
    other_epoch = TaskBatchSampler([40, 17], [3, 2], probabilities=[0.5, 0.5], seed=2)
    other_epoch.set_epoch(2)
    assert list(other_epoch) != everything


def test_sampler_rejects_bad_probabilities():
    sampler = TaskBatchSampler([4, 4], [2, 2])
    for bad in ([1.0], [-1.0, 2.0], [float("nan"), 1.0], [0.0, 0.0]):
        with pytest.raises(ValueError):
            sampler.set_probabilities(bad)


def test_synthetic_tasks_read_back_in_their_formats(gve_tasks):
    formats = {spec.name: spec.format for spec in gve_tasks["train"]}
    assert formats == {"syn_t2v": "T->V", "syn_t2i": "T->I", "syn_i2v": "I->V", "syn_v2v": "V->V", "syn_tv2v": "TV->V"}
    for split in ("train", "val"):
        for spec in gve_tasks[split]:
            records = read_task(spec)
            assert records and all(len(r.negatives) == spec.num_negatives for r in records)
    tv = read_task(next(s for s in gve_tasks["train"] if s.name == "syn_tv2v"))[0]
    assert tv.query.text.startswith("then: ") and tv.negatives[0].end == tv.query.end and tv.positive.end > tv.query.end


def test_data_module_batches(gve_tasks, processing):  # noqa: F811
    dm = MultiTaskDataModule(gve_tasks["train"], gve_tasks["val"], steps_per_epoch=6, num_workers=0, seed=0)
    dm.processing = processing
    dm.setup("fit")
    loader = dm.train_dataloader()
    for batch in loader:
        spec = next(s for s in gve_tasks["train"] if s.name == batch["task"])
        size = spec.batch_size
        assert batch["query"]["input_ids"].shape[0] == size
        assert batch["target"]["input_ids"].shape[0] == size * (1 + spec.num_negatives)
        assert batch["target_keys"].shape == (size,) and len(batch["ids"]) == size
        for side in ("query", "target"):  # where each row's media lie, read here on the host (issue 57.10)
            inputs, rows = batch[side], batch["media_rows"][side]
            for kind, grid, pixels in (
                ("image", "image_grid_thw", "pixel_values"),
                ("video", "video_grid_thw", "pixel_values_videos"),
            ):
                assert (kind in rows) == (grid in inputs)
                if kind in rows:
                    items, patches = rows[kind]
                    assert len(items) == len(inputs["input_ids"]) and sum(items) == len(inputs[grid])
                    assert sum(patches) == len(inputs[pixels])
    dm.set_task_probabilities({"syn_t2v": 1.0, "syn_t2i": 0, "syn_i2v": 0, "syn_v2v": 0, "syn_tv2v": 0})
    assert {b["task"] for b in loader} == {"syn_t2v"}
    no_synthetic = MultiTaskDataModule(gve_tasks["train"], include_synthetic=False)
    assert no_synthetic.task_names == ["syn_t2v"]
    with pytest.raises(ValueError, match="no probability"):
        dm.set_task_probabilities({"syn_t2v": 1.0})


def test_a_task_with_no_full_batch_is_refused_before_training(gve_tasks, processing):  # noqa: F811
    """The task's file, its records and its batch size in one line (the sampler walks whole batches only)."""
    first = gve_tasks["train"][0]
    records = len(read_task(first))
    specs = [replace(first, batch_size=records + 1), *gve_tasks["train"][1:]]
    dm = MultiTaskDataModule(specs, num_workers=0)
    dm.processing = processing
    dm.setup("fit")
    expected = f"{first.path}: training task {first.name!r} has {records} records, fewer than one batch of batch_size"
    with pytest.raises(AnnotationError, match=re.escape(f"{expected} {records + 1}")):
        dm.train_dataloader()


def test_eval_batches_cover_queries_and_distinct_targets(gve_tasks, processing):  # noqa: F811
    dm = MultiTaskDataModule(gve_tasks["train"], gve_tasks["val"], num_workers=0, eval_batch_size=5)
    dm.processing = processing
    dm.setup("fit")
    loader = dm.val_dataloader()
    seen = Counter()
    for batch in loader:
        for task, is_query, position in zip(
            batch["task_index"].tolist(), batch["is_query"].tolist(), batch["position"].tolist()
        ):
            seen[(task, is_query, position)] += 1
    for t, data in enumerate(dm.val_data):
        targets = dm.eval_set.targets[t]
        assert len(targets) == len({r.positive.key for r in data.records})
        assert all(seen[(t, True, i)] == 1 for i in range(len(data.records)))
        assert all(seen[(t, False, i)] == 1 for i in range(len(targets)))
        assert all(targets[j].key == r.positive.key for r, j in zip(data.records, dm.eval_set.query_targets[t]))


def test_content_key_is_stable_across_processes_and_distinguishes_windows():
    import subprocess
    import sys

    from lit_retrieval.data.items import MediaItem

    a = MediaItem(video="v.mp4", start=0.0, end=2.0)
    code = (
        "from lit_retrieval.data.gve.multitask import content_key; from lit_retrieval.data.items import MediaItem; "
        "print(content_key(MediaItem(video='v.mp4', start=0.0, end=2.0)))"
    )
    other = [
        int(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONHASHSEED": seed}
            ).stdout
        )
        for seed in ("1",)
    ]
    assert other == [content_key(a)]  # unlike hash(), the same on every rank and run
    assert content_key(a) != content_key(MediaItem(video="v.mp4", start=0.0, end=3.0))
    assert 0 <= content_key(a) < 2**63 and torch.tensor([content_key(a)]).dtype == torch.int64


def test_undecodable_pair_raises_or_is_replaced(tmp_path, gve_tasks, processing):  # noqa: F811
    from lit_retrieval.data.gve.multitask import TaskData, TrainBatches
    from lit_retrieval.data.media.video import VideoDecodeError

    spec = next(s for s in gve_tasks["train"] if s.name == "syn_t2v")
    records = read_task(spec)[:4]
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 64)
    records[1] = replace(records[1], positive=replace(records[1].positive, video=str(broken)))
    batch = [(0, i) for i in range(3)]
    with pytest.raises(VideoDecodeError, match="broken.mp4"):
        TrainBatches([TaskData(spec, records)], processing, "raise")[batch]
    replacing = TrainBatches([TaskData(spec, records)], processing, "replace")
    out = replacing[batch]
    assert replacing.replaced == 1 and out["ids"] == [records[0].record_id, records[2].record_id, records[2].record_id]
    assert out["query"]["input_ids"].shape[0] == 3
