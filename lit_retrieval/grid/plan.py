"""Plans: a paper table as rows (label, config files, overrides) x seeds, the metrics to report and,
optionally, the paper's published numbers (`lit-retrieval grid` runs a plan, `report` tabulates it).

    title: "MELON Tab. 2"
    seeds: [0, 1, 2]                # a row may name its own (e.g. a baseline run once)
    seed_keys: [data.init_args.shuffle_seed]   # set to each run's seed besides seed_everything
    configs: [configs/melon/train.yaml, configs/melon/data/melon.yaml]   # before every row's configs
    overrides: {trainer.max_epochs: 10}                                  # after every row's overrides
    evaluate: test                  # `test` (metrics.json) or `uvrb` (results.json); default test
    checkpoint: "last*.ckpt"        # the checkpoint evaluated (glob in the run folder); e.g. best*.ckpt
    uvrb: {tasks: configs/uvrb/uvrb.yaml, args: [--device, cuda]}        # with evaluate: uvrb
    metrics: [t2v/R@1, v2t/R@1]
    published: published/melon_tab2.yaml                                 # relative to the plan file
    rows:
      - {name: clip4clip, label: CLIP4Clip, configs: [configs/melon/heads/clip4clip.yaml, ...],
         overrides: {...}, test_configs: [...], test_overrides: {...}}
      - {name: gve3b, label: GVE-3B, model: /models/GVE-3B}              # evaluate a model, no training
      - {name: clip4clip_pess, evaluates: clip4clip, test_overrides: {model.init_args.evaluation.ties: pessimistic}}
    comparisons:                    # paired tests on the test queries, Holm-corrected together (`report`)
      - {name: mea, a: clip4clip_mea, b: clip4clip, k: 1}                # k: R@k compared (default 1)
      - {name: long_queries, a: longclip, b: clip, tokens: [78, null]}  # only queries of 78+ tokens
      - {name: rel_multi, a: sali, b: meanp_longer, queries: rel_multi}  # or relational, non_relational

A comparison needs its rows' test score matrices (`model.init_args.evaluation.save_scores: true`);
`report` runs `lit-retrieval compare`'s test on each (docs/experiments.md, "Shared statistics").
In an `evaluate: uvrb` plan a comparison reads each run's `uvrb/per_query.json` instead and tests the
mean over tasks of each task's metric, optionally over some of them:
`{name: curriculum, a: pyramid, b: uniform, tasks: [syn_t2v, syn_i2v]}`.

A row with `evaluates: ROW` trains nothing: it tests ROW's checkpoint of the same seed under its own
`test_configs` / `test_overrides` (e.g. SALI Tab. 3's inference variants of one trained model, Sec. 3:
"At inference, the trained model is used unchanged"), so rows that differ only at test time share
their weights instead of differing by training noise too. ROW is an earlier row that trains; the
row's seeds default to ROW's and must be among them.

Config paths are relative to the directory the command runs in (the repository root), like
`lit-retrieval fit --config`; `published` is relative to the plan file. Overrides are LightningCLI
keys (`model.init_args.mea.weight`) with YAML values; `{runs}` in a string value is replaced by the
runs folder (e.g. a warm start from another row's run: `{runs}/cm_clip4clip/seed0/...`).

A run's seed is its `seed_everything` (model initialisation, dropout) and the value of every
`seed_keys` entry, for the randomness a config seeds itself: the training order of a datamodule
(`shuffle_seed`, the GVE task schedule's `seed`). Without them the seeds of a row that starts from
a fixed checkpoint and has no dropout train the same model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_retrieval.errors import UsageError

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
EVALUATIONS = ("test", "uvrb")
PLAN_KEYS = {
    "title",
    "source",
    "seeds",
    "configs",
    "overrides",
    "evaluate",
    "seed_keys",
    "checkpoint",
    "uvrb",
    "metrics",
    "published",
    "rows",
    "comparisons",
}
ROW_KEYS = {"name", "label", "seeds", "configs", "overrides", "test_configs", "test_overrides", "model", "evaluates"}


@dataclass(frozen=True)
class Row:
    """One table row: `name` names its run folders, `label` is what the table shows."""

    name: str
    label: str
    seeds: list[int]
    configs: list[str]
    overrides: dict[str, Any] = field(default_factory=dict)
    test_configs: list[str] = field(default_factory=list)
    test_overrides: dict[str, Any] = field(default_factory=dict)
    model: str | None = None  # evaluate this model directory as it is (no `fit`)
    evaluates: str | None = None  # test this earlier row's checkpoint of the same seed (no `fit`)

    @property
    def trains(self) -> bool:
        return self.model is None and self.evaluates is None


@dataclass(frozen=True)
class Comparison:
    """Row `a` against row `b` on the same test queries: R@`k`, over queries of `tokens` (both
    bounds inclusive, `None` unbounded) when given, and of the relational subset `queries`; in an
    `evaluate: uvrb` plan, the mean over `tasks` (None: all) of each task's own metric."""

    name: str
    a: str
    b: str
    k: int = 1
    tokens: tuple[int | None, int | None] | None = None
    label: str = ""
    queries: str = "all"  # or SALI's relational subsets: relational, non_relational, rel_multi
    tasks: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Run:
    """One row x seed; `index` is its Slurm array task id (row-major over the rows and their seeds)."""

    index: int
    row: Row
    seed: int

    def folder(self, runs_dir: str | Path) -> Path:
        return Path(runs_dir) / self.row.name / f"seed{self.seed}"


@dataclass(frozen=True)
class Plan:
    path: Path
    title: str
    seeds: list[int]
    rows: list[Row]
    metrics: list[str]
    evaluate: str = "test"
    checkpoint: str = "last*.ckpt"
    uvrb_tasks: str = "configs/uvrb/uvrb.yaml"
    uvrb_args: list[str] = field(default_factory=list)
    published: Path | None = None
    source: str = ""
    comparisons: list[Comparison] = field(default_factory=list)
    seed_keys: list[str] = field(default_factory=list)  # config keys set to each run's seed, too

    def runs(self) -> list[Run]:
        pairs = [(row, seed) for row in self.rows for seed in row.seeds]
        return [Run(index, row, seed) for index, (row, seed) in enumerate(pairs)]

    def row(self, name: str) -> Row | None:
        return next((r for r in self.rows if r.name == name), None)


def _strings(value: Any, where: str, path: Path) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(str(path), f"{where} must be a list of strings, got {value!r}")
    return list(value)


def _mapping(value: Any, where: str, path: Path) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise UsageError(str(path), f"{where} must be a mapping of config keys to values, got {value!r}")
    return dict(value)


def _seeds(value: Any, where: str, path: Path) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in value)
    ):
        raise UsageError(str(path), f"'{where}' must be a non-empty list of integers, got {value!r}")
    if len(set(value)) != len(value):
        raise UsageError(str(path), f"'{where}' repeats a seed: {value}")
    return list(value)


def _row(
    raw: Any,
    number: int,
    seeds: list[int],
    common_configs: list[str],
    common_overrides: dict[str, Any],
    path: Path,
    earlier: list[Row],
) -> Row:
    where = f"rows[{number}]"
    if not isinstance(raw, dict):
        raise UsageError(str(path), f"{where} must be a mapping, got {raw!r}")
    unknown = set(raw) - ROW_KEYS
    if unknown:
        raise UsageError(str(path), f"{where}: unknown key(s) {sorted(unknown)}; a row takes {sorted(ROW_KEYS)}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise UsageError(str(path), f"{where}: 'name' must be a folder name (letters, digits, _ . -), got {name!r}")
    model = raw.get("model")
    configs = _strings(raw.get("configs"), f"{where}.configs", path)
    if model is not None and configs:
        raise UsageError(
            str(path), f"{where} ({name}): a row evaluates either a 'model' or trains from 'configs', not both"
        )
    row_seeds = _seeds(raw["seeds"], f"{where}.seeds", path) if "seeds" in raw else seeds
    evaluates = raw.get("evaluates")
    if evaluates is not None:
        source = _evaluated_row(raw, f"{where} ({name})", earlier, path)
        row_seeds = _seeds(raw["seeds"], f"{where}.seeds", path) if "seeds" in raw else source.seeds
        if not set(row_seeds) <= set(source.seeds):
            raise UsageError(str(path), f"{where} ({name}): seeds {row_seeds} not all trained by {evaluates!r}")
    return Row(
        name=name,
        label=str(raw.get("label", name)),
        seeds=row_seeds,
        configs=[] if model is not None or evaluates is not None else common_configs + configs,
        overrides={**common_overrides, **_mapping(raw.get("overrides"), f"{where}.overrides", path)},
        test_configs=_strings(raw.get("test_configs"), f"{where}.test_configs", path),
        test_overrides=_mapping(raw.get("test_overrides"), f"{where}.test_overrides", path),
        model=None if model is None else str(model),
        evaluates=None if evaluates is None else str(evaluates),
    )


def _evaluated_row(raw: dict[str, Any], where: str, earlier: list[Row], path: Path) -> Row:
    """The earlier training row an `evaluates` row tests; a row with training keys of its own is refused."""
    own = sorted(key for key in ("configs", "overrides", "model") if key in raw)
    if own:
        raise UsageError(str(path), f"{where}: a row that 'evaluates' another trains nothing; drop {own}")
    source = next((row for row in earlier if row.name == raw["evaluates"]), None)
    if source is None or not source.trains:
        trained = [row.name for row in earlier if row.trains]
        raise UsageError(
            str(path),
            f"{where}: 'evaluates' must name an earlier row that trains ({trained}), got {raw['evaluates']!r}",
        )
    return source


def load_plan(path: str | Path) -> Plan:
    """Read and check a plan; any mistake is a `UsageError` naming the file and the entry."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UsageError(str(path), "plan file not found") from None
    except OSError as err:
        raise UsageError(str(path), f"cannot read the plan ({err.strerror or err})") from None
    except UnicodeDecodeError as err:
        raise UsageError(str(path), f"the plan is not UTF-8 text (byte {err.start})") from None
    except yaml.YAMLError as err:
        raise UsageError(str(path), f"not valid YAML: {' '.join(str(err).split())}") from None
    if not isinstance(raw, dict):
        raise UsageError(str(path), "a plan is a mapping with 'seeds', 'metrics' and 'rows'")
    unknown = set(raw) - PLAN_KEYS
    if unknown:
        raise UsageError(str(path), f"unknown key(s) {sorted(unknown)}; a plan takes {sorted(PLAN_KEYS)}")
    seeds = _seeds(raw.get("seeds", [0]), "seeds", path)
    evaluate = raw.get("evaluate", "test")
    if evaluate not in EVALUATIONS:
        raise UsageError(str(path), f"'evaluate' must be one of {list(EVALUATIONS)}, got {evaluate!r}")
    uvrb = _mapping(raw.get("uvrb"), "uvrb", path)
    metrics = _strings(raw.get("metrics"), "metrics", path)
    if not metrics:
        raise UsageError(str(path), "'metrics' must name at least one metric key (e.g. t2v/R@1)")
    configs = _strings(raw.get("configs"), "configs", path)
    overrides = _mapping(raw.get("overrides"), "overrides", path)
    rows_raw = raw.get("rows")
    if not isinstance(rows_raw, list) or not rows_raw:
        raise UsageError(str(path), "'rows' must be a non-empty list")
    rows: list[Row] = []
    for i, r in enumerate(rows_raw):
        rows.append(_row(r, i, seeds, configs, overrides, path, rows))
    names = [r.name for r in rows]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UsageError(str(path), f"row names must be unique (they name the run folders); repeated: {repeated}")
    if evaluate == "test" and any(r.model is not None for r in rows):
        raise UsageError(str(path), "a row with 'model' (no training) needs 'evaluate: uvrb'")
    published = raw.get("published")
    comparisons_raw = raw.get("comparisons") or []
    if not isinstance(comparisons_raw, list):
        raise UsageError(str(path), f"'comparisons' must be a list, got {comparisons_raw!r}")
    comparisons = [_comparison(c, i, rows, evaluate, path) for i, c in enumerate(comparisons_raw)]
    repeated = sorted({c.name for c in comparisons if [d.name for d in comparisons].count(c.name) > 1})
    if repeated:
        raise UsageError(str(path), f"comparison names must be unique; repeated: {repeated}")
    return Plan(
        seed_keys=_strings(raw.get("seed_keys"), "seed_keys", path),
        path=path,
        title=str(raw.get("title", path.stem)),
        source=str(raw.get("source", "")),
        seeds=seeds,
        rows=rows,
        metrics=metrics,
        evaluate=evaluate,
        checkpoint=str(raw.get("checkpoint", "last*.ckpt")),
        uvrb_tasks=str(uvrb.get("tasks", "configs/uvrb/uvrb.yaml")),
        uvrb_args=_strings(uvrb.get("args"), "uvrb.args", path),
        published=None if published is None else path.parent / str(published),
        comparisons=comparisons,
    )


COMPARISON_KEYS = {"name", "label", "a", "b", "k", "tokens", "queries", "tasks"}
TEST_ONLY_KEYS = ("k", "tokens", "queries")  # slices of a test score matrix


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _comparison(raw: Any, number: int, rows: list[Row], evaluate: str, path: Path) -> Comparison:
    where = f"comparisons[{number}]"
    if not isinstance(raw, dict) or set(raw) - COMPARISON_KEYS:
        raise UsageError(str(path), f"{where} must be a mapping of {sorted(COMPARISON_KEYS)}, got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise UsageError(str(path), f"{where}: 'name' must be a name (letters, digits, _ . -), got {name!r}")
    names = [row.name for row in rows]
    for side in ("a", "b"):
        if raw.get(side) not in names:
            raise UsageError(str(path), f"{where} ({name}): '{side}' must name a row ({names}), got {raw.get(side)!r}")
    if raw["a"] == raw["b"]:
        raise UsageError(str(path), f"{where} ({name}): 'a' and 'b' are the same row {raw['a']!r}")
    if evaluate == "uvrb":
        return _task_comparison(raw, f"{where} ({name})", path)
    if "tasks" in raw:
        raise UsageError(str(path), f"{where} ({name}): 'tasks' selects uvrb tasks; this plan evaluates with 'test'")
    k = raw.get("k", 1)
    if not _count(k) or k < 1:
        raise UsageError(str(path), f"{where} ({name}): 'k' must be an integer >= 1, got {k!r}")
    tokens = raw.get("tokens")
    if tokens is not None:
        if not isinstance(tokens, list) or len(tokens) != 2 or not all(t is None or _count(t) for t in tokens):
            raise UsageError(str(path), f"{where} ({name}): 'tokens' is [low, high] (counts or null), got {tokens!r}")
        if None not in tokens and tokens[0] > tokens[1]:
            raise UsageError(str(path), f"{where} ({name}): 'tokens' {tokens} is empty (reversed bounds)")
        tokens = (tokens[0], tokens[1])
    from lit_retrieval.metrics.paired_scores import QUERY_SUBSETS  # torch: only for a plan that compares

    queries = raw.get("queries", "all")
    if queries not in QUERY_SUBSETS:
        raise UsageError(
            str(path), f"{where} ({name}): 'queries' must be one of {list(QUERY_SUBSETS)}, got {queries!r}"
        )
    return Comparison(name, raw["a"], raw["b"], k, tokens, str(raw.get("label", name)), queries)


def _task_comparison(raw: dict[str, Any], where: str, path: Path) -> Comparison:
    """A comparison of an `evaluate: uvrb` plan: each task's own metric over the named `tasks` (default
    all), averaged over tasks as AVG_datasets is (`metrics/paired_tasks.py`)."""
    sliced = [key for key in TEST_ONLY_KEYS if key in raw]
    if sliced:
        raise UsageError(str(path), f"{where}: {sliced} slice test score matrices; a uvrb plan compares 'tasks'")
    tasks = raw.get("tasks")
    if tasks is not None and (not isinstance(tasks, list) or not tasks or not all(isinstance(t, str) for t in tasks)):
        raise UsageError(str(path), f"{where}: 'tasks' must be a non-empty list of task names, got {tasks!r}")
    return Comparison(
        raw["name"], raw["a"], raw["b"], label=str(raw.get("label", raw["name"])), tasks=tasks and tuple(tasks)
    )


def load_published(path: Path) -> dict[str, dict[str, float]]:
    """A published-numbers file: `{table, page or section, rows: {row name: {metric: value}}}` -> the
    rows. `table` and where in the paper it is printed (`page` or `section`) are required."""
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise UsageError(str(path), f"cannot read the published numbers: {err}") from None
    where = isinstance(raw, dict) and (raw.get("page") or raw.get("section"))
    if not isinstance(raw, dict) or not raw.get("table") or not where or not isinstance(raw.get("rows"), dict):
        raise UsageError(
            str(path), "published numbers need 'table', 'page' or 'section' (where they are printed) and 'rows'"
        )
    rows = {}
    for name, values in raw["rows"].items():
        if not isinstance(values, dict) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()
        ):
            raise UsageError(str(path), f"row {name!r}: expected {{metric: number}}, got {values!r}")
        rows[str(name)] = {str(k): float(v) for k, v in values.items()}
    return rows
