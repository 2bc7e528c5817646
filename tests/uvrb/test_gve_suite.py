"""E2's machinery (docs/experiments.md): the held-out suite `gve-tasks` writes for `uvrb` (checked
against the corpus it was made from), a task list's own abilities, each query's metric term, the
in-batch-only switch, plan seeds that reach the datamodule, and paired comparisons of `evaluate:
uvrb` plans, every figure worked out by hand."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from lit_retrieval.commands import run_command
from lit_retrieval.uvrb.tasks import read_task_list
from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.gve.multitask import MultiTaskDataModule
from lit_retrieval.data.gve.tasks import TaskSpec
from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import load_plan
from lit_retrieval.grid.runs import prepare
from lit_retrieval.metrics.blockwise import BlockwiseResult, Relevance, query_values
from lit_retrieval.uvrb.abilities import grouped_ability_scores
from lit_retrieval.uvrb.tasks import load_retrieval_task

ROOT = Path(__file__).resolve().parents[2]


def test_the_held_out_suite_holds_the_test_videos_pairs(corpus, gve_tasks, tmp_path):
    """Each task of eval/tasks.yaml: one query per test-video event (TV->V: per pair of consecutive
    events), its one relevant item the event's target, the corpus the distinct targets."""
    eval_dir = Path(gve_tasks["val"][0].path).parent.parent / "eval"
    specs = {s.name: s for s in read_task_list(str(eval_dir / "tasks.yaml"), None, None)}
    assert {n: s.ability for n, s in specs.items()} == {
        "syn_t2v": "TXT",
        "syn_t2i": "TXT",
        "syn_i2v": "VIS",
        "syn_v2v": "VIS",
        "syn_tv2v": "CMP",
    }
    videos = [v for v in load_annotations(corpus / "annotations.json") if v.split == "test"]
    events = sum(len(v.events) for v in videos)
    by_path = {str((corpus / v.path).resolve()): v for v in videos}
    for name, spec in specs.items():
        data = load_retrieval_task(spec)
        assert spec.prompt and spec.metric == "R@1"
        assert len(data.queries) == (events - len(videos) if name == "syn_tv2v" else events), name
        assert all(len(r) == 1 for r in data.relevant), name
        if name in ("syn_i2v", "syn_v2v"):  # the whole video, shared by its events' queries
            assert sorted(str(Path(c.video).resolve()) for c in data.corpus) == sorted(by_path)
            assert all(c.start is None for c in data.corpus)
        else:
            assert len(data.corpus) == len(data.queries), name  # one target per query
        for qid, relevant in zip(data.query_ids, data.relevant):
            video_id, k = qid.split("/")
            target = data.corpus[relevant[0]]
            if target.video is not None:
                assert by_path[str(Path(target.video).resolve())].video_id == video_id
            if name == "syn_t2v":  # the clip of event k, in time order
                video = next(v for v in videos if v.video_id == video_id)
                start, end = sorted(e.intervals[0] for e in video.events)[int(k)]
                assert (target.start, target.end) == (start, end)


def test_a_task_lists_abilities_are_means_of_its_tasks():
    scores = {"t2v": 0.5, "t2i": 0.3, "i2v": 0.2, "v2v": 0.6, "tv2v": 0.1}
    groups = {"t2v": "TXT", "t2i": "TXT", "i2v": "VIS", "v2v": "VIS", "tv2v": "CMP"}
    out = grouped_ability_scores(scores, groups)
    assert out == pytest.approx(
        {"AVG_datasets": 0.34, "AVG_abilities": (0.4 + 0.4 + 0.1) / 3, "TXT": 0.4, "VIS": 0.4, "CMP": 0.1}
    )
    assert list(out)[2:] == ["TXT", "VIS", "CMP"]
    with pytest.raises(ValueError, match=r"tasks without an ability: \['tv2v'\]"):
        grouped_ability_scores(scores, {k: v for k, v in groups.items() if k != "tv2v"})


def test_each_querys_term_of_the_metric():
    # query 0: relevant items ranked 1 and 4; query 1: ranked 2; query 2: none
    result = BlockwiseResult(
        topk=torch.zeros(3, 1),
        topk_scores=torch.zeros(3, 1),
        ranks=torch.tensor([1.0, 4.0, 2.0]),
        relevance=Relevance(items=torch.tensor([0, 3, 1]), offsets=torch.tensor([0, 2, 3, 3])),
    )
    assert query_values(result, "R@1")[:2].tolist() == [0.5, 0.0]
    assert query_values(result, "R@5")[:2].tolist() == [1.0, 1.0]
    assert query_values(result, "P@1")[:2].tolist() == query_values(result, "hit@1")[:2].tolist() == [1.0, 0.0]
    assert torch.isnan(query_values(result, "R@1")[2])
    with pytest.raises(ValueError, match="R@k, hit@k or P@1"):
        query_values(result, "MnR")


def test_in_batch_only_drops_every_tasks_hard_negatives(tmp_path):
    tasks = [TaskSpec("a", "a.jsonl", "T->V", num_negatives=2), TaskSpec("b", "b.jsonl", "T->T", num_negatives=0)]
    assert [s.num_negatives for s in MultiTaskDataModule(tasks, hard_negatives=False).specs] == [0, 0]
    assert [s.num_negatives for s in MultiTaskDataModule(tasks).specs] == [2, 0]


def test_a_plans_seed_keys_reach_each_runs_config(monkeypatch, tmp_path):
    monkeypatch.chdir(ROOT)
    plan = load_plan(ROOT / "configs" / "plans" / "sali_control.yaml")
    assert plan.seed_keys == ["data.init_args.shuffle_seed"]
    seeds = {}
    for run in plan.runs():
        config = yaml.safe_load(Path(prepare(plan, run, tmp_path, {}, {})["fit"][-1]).read_text())
        seeds[(run.row.name, run.seed)] = (config["seed_everything"], config["data"]["init_args"]["shuffle_seed"])
    assert seeds[("sali_max", 2)] == (2, 2) and seeds[("meanp_longer", 1)] == (1, 1)
    raw = yaml.safe_load((ROOT / "configs" / "plans" / "sali_control.yaml").read_text())
    raw["seed_keys"] = ["data.init_args.shufle_seed"]
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(raw))
    typo = load_plan(tmp_path / "typo.yaml")
    with pytest.raises(UsageError, match="seed_keys: 'data.init_args.shufle_seed' is not a key"):
        prepare(typo, typo.runs()[0], tmp_path / "typo", {}, {}, write=False)


# per row and seed, each query's R@1 hit in task "big" (4 queries) and task "small" (2 queries)
HITS = {
    "a": [{"big": [1, 1, 0, 0], "small": [1, 1]}, {"big": [1, 0, 0, 0], "small": [1, 0]}],
    "b": [{"big": [1, 1, 1, 0], "small": [0, 0]}, {"big": [1, 1, 0, 0], "small": [0, 0]}],
}


def write_uvrb_runs(root: Path) -> Path:
    for row, seeds in HITS.items():
        for seed, tasks in enumerate(seeds):
            run = root / "runs" / row / f"seed{seed}"
            (run / "uvrb").mkdir(parents=True)
            per_query = {
                t: {"metric": "R@1", "ids": [f"{t}{i}" for i in range(len(h))], "values": h} for t, h in tasks.items()
            }
            (run / "uvrb" / "per_query.json").write_text(json.dumps(per_query))
            datasets = {t: {"score": float(np.mean(h))} for t, h in tasks.items()}
            (run / "uvrb" / "results.json").write_text(json.dumps({"datasets": datasets}))
            (run / "done.json").write_text(json.dumps({"metrics": "uvrb/results.json", "checkpoint": None}))
    return root / "runs"


def write_uvrb_plan(root: Path, comparisons: list[dict]) -> Path:
    plan = {
        "title": "by hand",
        "seeds": [0, 1],
        "evaluate": "uvrb",
        "uvrb": {"tasks": "tasks.yaml"},
        "metrics": ["big", "small"],
        "rows": [{"name": "a", "configs": []}, {"name": "b", "configs": []}],
        "comparisons": comparisons,
    }
    (root / "plan.yaml").write_text(yaml.safe_dump(plan))
    return root / "plan.yaml"


def test_a_uvrb_plans_comparison_tests_the_mean_over_tasks_worked_by_hand(tmp_path):
    runs = write_uvrb_runs(tmp_path)
    plan = write_uvrb_plan(
        tmp_path, [{"name": "all", "a": "a", "b": "b"}, {"name": "small", "a": "a", "b": "b", "tasks": ["small"]}]
    )
    out = tmp_path / "report"
    assert run_command("report", [str(runs), "--out", str(out), "--plan", str(plan)]) == 0
    rows = {r["comparison"]: r for r in csv.DictReader((out / "comparisons.csv").open())}
    # over the seeds: a big [1, .5, 0, 0] small [1, .5]; b big [1, 1, .5, 0] small [0, 0]
    # per-task means: a .375, .75 -> 56.25; b .625, 0 -> 31.25 (the mean over tasks, not over the 6 queries)
    full = rows["all"]
    assert (float(full["r_at_k_a"]), float(full["r_at_k_b"])) == pytest.approx((56.25, 31.25))
    assert float(full["difference"]) == pytest.approx(25.0) and full["queries"] == "6"
    # weights Q / (T n_t): big 6/8, small 6/4; nonzero weighted differences: big -.375, -.375, small 1.5, .75
    # observed sum 1.5; the 16 sign sums are x + y, x in {±2.25, ±.75} (from 1.5, .75), y in {.75, 0, 0, -.75}:
    # |x + y| >= 1.5 for all 4 y at x = ±2.25 and for one y at x = ±.75: 10 of 16
    assert float(full["p_value"]) == pytest.approx(10 / 16)
    small = rows["small"]  # one task: plain differences [1, .5], both flips count: |sum| >= 1.5 in 2 of 4
    assert (float(small["difference"]), float(small["p_value"]), small["subset"]) == (75.0, 0.5, "small")
    text = (out / "report.md").read_text()
    assert "| all | a | b | 6 | 2/2 | task mean 56.25 | 31.25 | +25.00 [" in text


@pytest.mark.parametrize(
    ("comparison", "evaluate", "message"),
    [
        ({"k": 5}, "uvrb", r"\['k'\] slice test score matrices; a uvrb plan compares 'tasks'"),
        ({"tasks": []}, "uvrb", "'tasks' must be a non-empty list of task names"),
        ({"tasks": ["big"]}, "test", "'tasks' selects uvrb tasks; this plan evaluates with 'test'"),
    ],
)
def test_a_comparison_of_the_wrong_kind_is_refused_by_name(tmp_path, comparison, evaluate, message):
    plan = write_uvrb_plan(tmp_path, [{"name": "x", "a": "a", "b": "b", **comparison}])
    raw = yaml.safe_load(plan.read_text())
    raw["evaluate"] = evaluate
    plan.write_text(yaml.safe_dump(raw))
    with pytest.raises(UsageError, match=message):
        load_plan(plan)


def test_runs_of_other_queries_are_refused_naming_the_file(tmp_path):
    runs = write_uvrb_runs(tmp_path)
    other = runs / "b" / "seed1" / "uvrb" / "per_query.json"
    raw = json.loads(other.read_text())
    raw["big"]["ids"] = ["x0", "x1", "x2", "x3"]
    other.write_text(json.dumps(raw))
    plan = write_uvrb_plan(tmp_path, [{"name": "all", "a": "a", "b": "b"}])
    with pytest.raises(UsageError, match=r"b/seed1/uvrb/per_query.json: task 'big': not the queries of"):
        run_command("report", [str(runs), "--out", str(tmp_path / "r"), "--plan", str(plan)])


def test_a_trained_rows_saved_config_builds_the_model_for_uvrb(monkeypatch, tmp_path):
    """`grid` evaluates a trained row with `uvrb --config RUN/config.yaml --ckpt ...`: the config it saved
    (as `fit` saves one) holds fit's own `ckpt_path` and `weights_only`, which the model-only parser of
    `uvrb`, `index` and `search` refused ('Option ckpt_path is not accepted', E2's first evaluation)."""
    from lit_retrieval.retrieval_cli import build_module

    monkeypatch.chdir(ROOT)
    plan = load_plan(ROOT / "configs" / "plans" / "sali_control.yaml")
    config = prepare(plan, plan.runs()[0], tmp_path, {}, {})["fit"][-1]
    saved = yaml.safe_load(Path(config).read_text())
    assert "ckpt_path" in saved and "weights_only" in saved
    module, _ = build_module(config)
    assert type(module).__name__ == saved["model"]["class_path"].rsplit(".", 1)[-1]
