"""What a grid run asks Slurm for: the nodes, ranks and GPUs its config trains on.

Resources come from the run's resolved config, never from the template's defaults:
`trainer.num_nodes` -> NODES, `trainer.devices` -> TASKS_PER_NODE (one rank per device) and, unless
`trainer.accelerator` is `cpu`, GPUS (GPUs per node; GRES `gpu:N`, or `none` on the CPU). A config
that leaves devices or nodes to the launcher (`auto`, -1, absent) takes them from --set (or the
template's default) and gets them written into its config.yaml; a --set that contradicts the config
is refused, so a row never trains on fewer GPUs than its config says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lit_retrieval.errors import UsageError


@dataclass(frozen=True)
class Resources:
    """What one array task of a run asks Slurm for."""

    nodes: int
    tasks_per_node: int
    gpus: int  # per node; 0: CPU only

    def variables(self) -> dict[str, str]:
        """The grid.sbatch variables these set."""
        return {
            "NODES": str(self.nodes),
            "TASKS_PER_NODE": str(self.tasks_per_node),
            "GPUS": str(self.gpus),
            "GRES": f"gpu:{self.gpus}" if self.gpus else "none",
        }


def _count(value: Any) -> int | None:
    """A positive device/node count from a config value; None where Lightning decides (auto, -1, absent)."""
    if isinstance(value, list):
        return len(value) or None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def _integer(values: dict[str, str], name: str) -> int | None:
    if name not in values:
        return None
    if not values[name].strip().isdigit():
        raise UsageError("--set", f"{name} must be a whole number, got {values[name]!r}")
    return int(values[name])


def _on_cpu(trainer: dict[str, Any]) -> bool:
    accelerator = trainer.get("accelerator")
    if isinstance(accelerator, dict):
        accelerator = accelerator.get("class_path", "")
    return str(accelerator).lower() in ("cpu", "lightning.pytorch.accelerators.cpuaccelerator")


def resources(
    config: dict[str, Any] | None, values: dict[str, str], default_gpus: int, where: str
) -> tuple[Resources, dict[str, int]]:
    """The run's `Resources` and the trainer keys to write into its config (those it left to the
    launcher). `config` is None for a row that evaluates a `model` (one process). A --set NODES,
    GPUS or TASKS_PER_NODE that contradicts the config is a `UsageError` naming the row."""
    nodes_set, gpus_set, tasks_set = (_integer(values, n) for n in ("NODES", "GPUS", "TASKS_PER_NODE"))
    if config is None:
        return Resources(nodes_set or 1, 1, default_gpus if gpus_set is None else gpus_set), {}
    trainer = config.get("trainer") or {}
    cpu = _on_cpu(trainer)
    if cpu and gpus_set:
        raise UsageError(where, f"--set GPUS={gpus_set}, but its config trains on the CPU (trainer.accelerator: cpu)")
    if not cpu and None not in (gpus_set, tasks_set) and gpus_set != tasks_set:
        raise UsageError(where, f"--set GPUS={gpus_set} and TASKS_PER_NODE={tasks_set}: one rank per GPU")
    fill: dict[str, int] = {}
    ranks_name = "TASKS_PER_NODE" if cpu or tasks_set is not None else "GPUS"
    ranks = tasks_set if cpu or tasks_set is not None else gpus_set
    per_node = _agree(trainer, "devices", ranks, ranks_name, 1 if cpu else default_gpus, fill, where)
    nodes = _agree(trainer, "num_nodes", nodes_set, "NODES", 1, fill, where)
    return Resources(nodes, per_node, 0 if cpu else per_node), fill


def _agree(
    trainer: dict[str, Any], key: str, wanted: int | None, name: str, fallback: int, fill: dict[str, int], where: str
) -> int:
    """trainer.KEY as the config sets it, which --set NAME must not contradict; where the config
    leaves it to the launcher, the --set value (else `fallback`), recorded in `fill`."""
    configured = _count(trainer.get(key))
    if configured is None:
        configured = fill[key] = wanted or fallback
    elif wanted is not None and wanted != configured:
        raise UsageError(
            where,
            f"--set {name}={wanted}, but its config trains on trainer.{key}={configured}; "
            f"drop the --set, or add --override trainer.{key}={wanted}",
        )
    return configured
