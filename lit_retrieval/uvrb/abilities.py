"""UVRB ability aggregates exactly as GVE Tab. 2 computes them from Tab. 1's per-dataset scores.

    S, T, PR, CG, LC  = mean over the datasets of that (sub-)domain
    FG                = mean(S, T, PR)                 (sub-domain means, not the 7 datasets)
    TXT               = mean(CG, FG, LC)               (the textual-query domains)
    CMP, VIS          = mean over their datasets
    AVG (abilities)   = mean(TXT, CMP, VIS, CG, FG, LC)
    AVG (datasets)    = mean over the 16 datasets (Tab. 1's AVG)

Reconstructed from the published tables, where these rules reproduce every ability column of
every model to rounding (tested); the paper gives no formula.
"""

from __future__ import annotations

import math
from statistics import mean

from rich.table import Table

from lit_retrieval.data.reading import parse_json, read_text
from lit_retrieval.errors import UsageError
from lit_retrieval.uvrb.datasets import UVRB_DATASETS

ABILITIES = ("TXT", "CMP", "VIS", "CG", "FG", "LC", "S", "T", "PR")


def ability_scores(scores: dict[str, float]) -> dict[str, float]:
    """Per-dataset scores (keys: UVRB dataset names, all 16) -> abilities and both averages."""
    unknown = set(scores) - set(UVRB_DATASETS)
    missing = set(UVRB_DATASETS) - set(scores)
    if unknown or missing:
        raise ValueError(
            f"need a score for each of the 16 UVRB datasets; missing {sorted(missing)}, unknown {sorted(unknown)}"
        )

    def over(**match) -> float:
        return mean(scores[d.name] for d in UVRB_DATASETS.values() if all(getattr(d, k) == v for k, v in match.items()))

    out = {domain: over(task="TXT", domain=domain) for domain in ("CG", "S", "T", "PR", "LC")}
    out["FG"] = mean([out["S"], out["T"], out["PR"]])
    out["TXT"] = mean([out["CG"], out["FG"], out["LC"]])
    out["CMP"] = over(task="CMP")
    out["VIS"] = over(task="VIS")
    out["AVG_abilities"] = mean(out[k] for k in ("TXT", "CMP", "VIS", "CG", "FG", "LC"))
    out["AVG_datasets"] = mean(scores.values())
    return {k: out[k] for k in ("AVG_datasets", "AVG_abilities", *ABILITIES)}


def grouped_ability_scores(scores: dict[str, float], groups: dict[str, str]) -> dict[str, float]:
    """Abilities of a task list other than UVRB's 16 (e.g. `gve-tasks`' synthetic suite): each task
    names the one ability it measures (`ability:` in the task list); an ability scores the mean of its
    tasks, AVG_abilities the mean over abilities and AVG_datasets the mean over tasks, as Tab. 2 does
    for the flat UVRB abilities (TXT, CMP, VIS). Abilities keep their first task's order."""
    missing = sorted(set(scores) - set(groups))
    if missing:
        raise ValueError(f"tasks without an ability: {missing}")
    by_ability: dict[str, list[float]] = {}
    for name, score in scores.items():
        by_ability.setdefault(groups[name], []).append(score)
    out = {ability: mean(values) for ability, values in by_ability.items()}
    return {"AVG_datasets": mean(scores.values()), "AVG_abilities": mean(out.values()), **out}


def read_scores(path: str) -> dict[str, float]:
    """Per-dataset scores of a `results.json` (`{"datasets": {name: {"score": ...}}}`) or of a plain
    `{name: score}` object; any other shape, or a score that is not a finite number, is a
    `UsageError` naming the file and the dataset."""
    raw = parse_json(read_text(path), path, constants=True)  # NaN is reported with its dataset below
    if not isinstance(raw, dict):
        raise UsageError(path, f"expected a JSON object (results.json or {{dataset: score}}), got {type(raw).__name__}")
    if "datasets" in raw:
        if not isinstance(raw["datasets"], dict):
            raise UsageError(path, "'datasets' must be an object {dataset: {\"score\": ...}}")
        entries = raw["datasets"]
        bad = next((name for name, entry in entries.items() if not isinstance(entry, dict)), None)
        if bad is not None:
            raise UsageError(path, f"dataset {bad!r}: expected an object with a 'score', got {entries[bad]!r}")
        raw = {name: entry["score"] for name, entry in entries.items() if "score" in entry}
    for name, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise UsageError(path, f"dataset {name!r}: the score must be a finite number, got {value!r}")
    return {name: float(value) for name, value in raw.items()}


def ability_table(abilities: dict[str, float], title: str) -> Table:
    """The averages and per-ability scores of `ability_scores` as one rich table row."""
    columns = ("AVG_datasets", "AVG_abilities", *ABILITIES)
    table = Table(title=title)
    for key in columns:
        table.add_column(key, justify="right")
    table.add_row(*(f"{abilities[k]:.3f}" for k in columns))
    return table
