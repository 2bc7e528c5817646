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

from statistics import mean

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
