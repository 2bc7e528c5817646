"""The package's layers point one way (docs/architecture.md, "Layers").

Every module of `lit_retrieval` belongs to a unit: a sub-package (`data`, `models`, ...) or a
top-level module (`errors`, `checkpoint_io`, ...). A unit may import only units of a strictly
lower rank in `LAYERS` (or itself); units of the same rank are independent of each other. The
imports are read with `ast` from the source, including imports inside functions, under
`TYPE_CHECKING`, and `importlib.import_module("lit_retrieval....")` calls, so a lazy import
cannot hide an edge. A new unit must be given a rank here (and in docs/architecture.md).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "lit_retrieval"

# rank: units (lower ranks never import higher ones; keep docs/architecture.md in step)
LAYERS: dict[str, int] = {
    "lit_retrieval": 0,  # the package's __init__: `__version__` only
    "errors": 0,  # InputError and its kin: what every layer raises for bad input
    "distributed": 1,  # world size, all-gathers (with gradient, of variable size)
    "checkpoint_io": 1,  # atomic checkpoint writes, readable errors for corrupt files
    "config_errors": 1,  # jsonargparse parser whose errors list the valid keys
    "locking": 1,  # OutputLock: one writer per output folder, naming the holder
    "strategies": 1,  # DeepSpeedStrategy that also runs on CPU (a YAML class_path)
    "precision": 1,  # float32 scoring whatever the training precision (autocast off, weights cast up)
    "progress": 1,  # progress of long commands: rich bar in a terminal, plain periodic lines otherwise
    "shipped": 1,  # the configs shipped as package data
    "faiss_library": 1,  # `import faiss` with a one-line error when it is missing or two are installed
    "run_folder": 1,  # every path of a run under its run folder (a launcher's --trainer.default_root_dir, a grid run)
    "data": 2,  # records, formats, media items, video decoding, data modules
    "models": 3,  # encoders, heads, GVE embedder
    "losses": 4,
    "metrics": 4,
    "modules": 5,  # LightningModules
    "callbacks": 6,
    "retrieval_cli": 7,  # RetrievalCLI (LightningCLI); also builds a module from a training config
    "search": 8,  # item embedders, embedding cache, faiss index
    "uvrb": 9,  # UVRB benchmark runner (uses search's embedders and cache)
    "mteb_model": 9,  # MTEBModel: our item embedders inside MTEB (uses search's loading)
    "grid": 9,  # `grid` / `report`: plans, run folders, seed statistics (uses retrieval_cli's parser)
    "serve": 9,  # `lit-retrieval serve`: HTTP API and page over a search index (uses search)
    "melon_build": 9,  # `build-melon`: MELON's construction pipeline (uses search's item embedders)
    "launch": 10,  # Slurm: job templates and their language, a run's resources, array submission
    "commands": 11,  # subcommands, imported when dispatched: they parse arguments and call the layers below
    "cli": 12,  # the `lit-retrieval` entry point: nothing in the library imports it
    "__main__": 13,
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    """`<root>/data/tasks.py` -> `lit_retrieval.data.gve.tasks`."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """`lit_retrieval.data.gve.tasks` -> `data`; `lit_retrieval` -> `lit_retrieval`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def imported_modules(path: Path, root: Path = PACKAGE) -> list[tuple[str, int]]:
    """(`lit_retrieval...` module, line) for every import in the file, wherever it stands."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
        elif (
            isinstance(node, ast.Call)
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) in ("import_module", "__import__")
        ):
            found.append((node.args[0].value, node.lineno))
    return [(name, line) for name, line in found if name == "lit_retrieval" or name.startswith("lit_retrieval.")]


def backward_edges(root: Path = PACKAGE) -> list[str]:
    """Every import that goes against `LAYERS`, as `file:line: a -> b (rank i -> rank j)`."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        source = unit(module_name(path, root))
        if source not in LAYERS:
            problems.append(f"{path}: unit {source!r} has no rank in LAYERS")
            continue
        for target_module, line in imported_modules(path, root):
            target = unit(target_module)
            if target == source:
                continue
            if target not in LAYERS:
                problems.append(f"{path}:{line}: imports {target_module}, whose unit {target!r} has no rank in LAYERS")
            elif LAYERS[target] >= LAYERS[source]:
                ranks = f"rank {LAYERS[source]} -> {LAYERS[target]}"
                problems.append(f"{path}:{line}: {source} -> {target_module} ({ranks})")
    return problems


# rank: parts of `data/` (docs/architecture.md, "The data layer"); the same one-way rule inside the unit
DATA_RANKS: dict[str, int] = {
    "floor": 0,  # data/*.py: records, reading, bad_records, annotations, items (shared types)
    "media": 1,  # file -> frames: video, frame_cache, shots, normalize, identity
    "text": 1,  # query text: queries, spans
    "batching": 2,  # records -> batches: dataset, datamodule (the bases), samplers, workers, resume
    "formats": 2,  # release parsers read outside training (MELON, ActivityNet, DiDeMo, YouCook2): no DataModule
    "gve": 3,  # GVE's multi-task data
    "streaming": 3,  # a video-text split as litdata shards and the DataModule streaming them
    "datasets.synthetic": 3,  # the synthetic corpus generator, which the canonical DataModule can run
    "datasets": 4,  # every other dataset file is a part of its own: a leaf no other dataset imports
    "exports": 5,  # data/__init__.py: the class paths YAML configs name
}
ROOMS = ("media", "text", "batching", "formats", "gve", "streaming", "datasets")


def data_part(module: str) -> str:
    """`lit_retrieval.data.media.video` -> `media`; `...data.datasets.msvd` -> `datasets.msvd`;
    `...data.records` -> `floor`; `lit_retrieval.data` -> `exports`."""
    parts = module.split(".")[2:]
    if not parts:
        return "exports"
    if parts[0] not in ROOMS:
        return "floor"
    if parts[0] == "datasets":
        return f"datasets.{parts[1] if len(parts) > 1 else '__init__'}"
    return parts[0]


def data_rank(part: str) -> int:
    return DATA_RANKS.get(part, DATA_RANKS["datasets"] if part.startswith("datasets.") else -1)


def data_backward_edges(root: Path = PACKAGE) -> list[str]:
    """Every import between parts of `data/` that goes against `DATA_RANKS`."""
    problems = []
    for path in sorted((root / "data").rglob("*.py")):
        source = data_part(module_name(path, root))
        for target_module, line in imported_modules(path, root):
            if unit(target_module) != "data" or (target := data_part(target_module)) == source:
                continue
            if data_rank(target) >= data_rank(source):
                ranks = f"rank {data_rank(source)} -> {data_rank(target)}"
                problems.append(f"{path}:{line}: {source} -> {target_module} ({ranks})")
    return problems


# The rooms the layers do not show (docs/architecture.md, "Layers"): Slurm lives in `launch/` alone, and a
# command parses its arguments and calls the library (no classes of its own, no long helpers beside `run`).
SLURM_PROGRAMS = {"sbatch", "squeue", "scontrol", "sinfo", "srun", "scancel"}
COMMAND_HELPER_LINES = 15  # an argument check or conversion; more is library work that belongs below


def _code_strings(tree: ast.AST) -> list[ast.Constant]:
    """The string constants of a module that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def slurm_outside_launch(root: Path = PACKAGE) -> list[str]:
    """Code outside `launch/` that names a Slurm program or writes `#SBATCH` lines (docstrings may
    describe them)."""
    problems = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "launch":
            continue
        for node in _code_strings(ast.parse(path.read_text(), str(path))):
            if node.value.strip() in SLURM_PROGRAMS or "#SBATCH" in node.value:
                problems.append(f"{path}:{node.lineno}: {node.value.strip()[:40]!r}")
    return problems


def commands_that_do_more_than_parse(root: Path = PACKAGE) -> list[str]:
    """Classes in `commands/`, and functions there besides the entry points (`run`, a sub-command's
    `run_<name>`, `parse_args`) longer than `COMMAND_HELPER_LINES`."""
    problems = []
    for path in sorted((root / "commands").glob("*.py")):
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef):
                problems.append(f"{path}:{node.lineno}: class {node.name}")
            elif isinstance(node, ast.FunctionDef) and not (
                node.name in ("run", "parse_args") or node.name.startswith("run_")
            ):
                lines = node.end_lineno - node.lineno + 1
                if lines > COMMAND_HELPER_LINES:
                    problems.append(f"{path}:{node.lineno}: {node.name} ({lines} lines)")
    return problems


SHARED_ARGUMENTS = "lit_retrieval.commands.arguments"  # the one module of commands/ the others may import


def commands_importing_commands(root: Path = PACKAGE) -> list[str]:
    """Imports of one command's module by another (what they share lives in `commands/arguments.py`)."""
    problems = []
    for path in sorted((root / "commands").glob("*.py")):
        if path.stem in ("__init__", "arguments"):
            continue
        for target, line in imported_modules(path, root):
            if target.startswith("lit_retrieval.commands.") and target != SHARED_ARGUMENTS:
                problems.append(f"{path}:{line}: {target}")
    return problems


def test_commands_share_arguments_through_one_module(tmp_path):
    assert commands_importing_commands() == []
    fake = tmp_path / "lit_retrieval" / "commands"
    fake.mkdir(parents=True)
    (fake / "search.py").write_text("from lit_retrieval.commands.index import add_model_arguments\n")
    (fake / "index.py").write_text("from lit_retrieval.commands.arguments import positive_int\n")
    assert commands_importing_commands(fake.parent) == [f"{fake / 'search.py'}:1: lit_retrieval.commands.index"]


def test_slurm_lives_in_the_launch_room():
    assert slurm_outside_launch() == []


def test_commands_only_parse():
    assert commands_that_do_more_than_parse() == []


def test_the_room_checks_catch_what_they_name(tmp_path):
    fake = tmp_path / "lit_retrieval"
    for room in ("commands", "grid", "launch"):
        (fake / room).mkdir(parents=True)
    (fake / "launch" / "queue.py").write_text('import subprocess\nsubprocess.run(["squeue"])\n')
    (fake / "grid" / "runs.py").write_text(
        '"""Asks `squeue`."""\nimport subprocess\nsubprocess.run(["squeue", "-h"])\n'
    )
    (fake / "grid" / "jobs.py").write_text('SCRIPT = "#!/bin/bash\\n#SBATCH --array=0-3\\n"\n')
    body = "\n".join(f"    x = {i}" for i in range(COMMAND_HELPER_LINES))
    (fake / "commands" / "grid.py").write_text(
        f"class Submitter:\n    pass\n\n\ndef helper():\n{body}\n\n\ndef run(argv):\n{body}\n"
    )
    assert slurm_outside_launch(fake) == [
        f"{fake / 'grid' / 'jobs.py'}:1: '#!/bin/bash\\n#SBATCH --array=0-3'",
        f"{fake / 'grid' / 'runs.py'}:3: 'squeue'",
    ]
    assert commands_that_do_more_than_parse(fake) == [
        f"{fake / 'commands' / 'grid.py'}:1: class Submitter",
        f"{fake / 'commands' / 'grid.py'}:5: helper ({COMMAND_HELPER_LINES + 1} lines)",
    ]


def test_imports_follow_the_layers():
    assert backward_edges() == []


def test_the_parts_of_data_follow_their_ranks():
    assert data_backward_edges() == []


def test_a_dataset_file_is_a_leaf(tmp_path):
    """The data check itself: a dataset importing another dataset, and media importing batching, are refused."""
    fake = tmp_path / "lit_retrieval"
    for room in ("datasets", "media", "batching"):
        (fake / "data" / room).mkdir(parents=True)
    (fake / "data" / "datasets" / "a.py").write_text("from lit_retrieval.data.batching.datamodule import Base\n")
    (fake / "data" / "datasets" / "b.py").write_text("from lit_retrieval.data.datasets.a import Parser\n")
    (fake / "data" / "media" / "video.py").write_text("from ..batching import dataset\n")
    (fake / "data" / "records.py").write_text("from lit_retrieval.data import VideoTextDataModule\n")
    assert data_backward_edges(fake) == [
        f"{fake / 'data' / 'datasets' / 'b.py'}:1: datasets.b -> lit_retrieval.data.datasets.a (rank 4 -> 4)",
        f"{fake / 'data' / 'media' / 'video.py'}:1: media -> lit_retrieval.data.batching (rank 1 -> 2)",
        f"{fake / 'data' / 'records.py'}:1: floor -> lit_retrieval.data (rank 0 -> 5)",
    ]


def test_the_check_sees_lazy_relative_and_type_only_imports(tmp_path):
    """The check itself: a copy of the package with backward edges hidden in the ways code hides them."""
    fake = tmp_path / "lit_retrieval"
    (fake / "data").mkdir(parents=True)
    (fake / "models").mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "data" / "__init__.py").write_text("")
    (fake / "models" / "__init__.py").write_text("from lit_retrieval.data import x\n")  # allowed: data is lower
    (fake / "data" / "lazy.py").write_text("def f():\n    from lit_retrieval.models import y\n")
    (fake / "data" / "relative.py").write_text("from ..models import y\n")
    (fake / "data" / "typing_only.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import lit_retrieval.cli\n"
    )
    (fake / "data" / "dynamic.py").write_text(
        "import importlib\nimportlib.import_module('lit_retrieval.search.index')\n"
    )
    (fake / "newthing.py").write_text("")
    problems = backward_edges(fake)
    expected = [
        ("data/dynamic.py:2", "data -> lit_retrieval.search.index"),
        ("data/lazy.py:2", "data -> lit_retrieval.models"),
        ("data/relative.py:1", "data -> lit_retrieval.models"),
        ("data/typing_only.py:3", "data -> lit_retrieval.cli"),
    ]
    for where, edge in expected:
        assert any(where in p and edge in p for p in problems), (where, problems)
    assert any("'newthing' has no rank" in p for p in problems)
    assert len(problems) == len(expected) + 1


def test_peers_of_one_rank_do_not_import_each_other(tmp_path):
    fake = tmp_path / "lit_retrieval"
    (fake / "losses").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "losses" / "x.py").write_text("from lit_retrieval.metrics.ranking import summarize_ranks\n")
    expected = f"{fake / 'losses' / 'x.py'}:1: losses -> lit_retrieval.metrics.ranking (rank 4 -> 4)"
    assert backward_edges(fake) == [expected]


def test_benchmarks_import_the_library_not_its_commands():
    """`commands/` only parses arguments: what a benchmark times lives in the library."""
    benchmarks = PACKAGE.parent / "benchmarks"
    found = [
        f"{path.name}:{line}: {name}"
        for path in sorted(benchmarks.glob("*.py"))
        for name, line in imported_modules(path, benchmarks)
        if unit(name) in ("commands", "cli")
    ]
    assert found == []


def test_the_training_path_does_not_load_faiss_or_scenedetect():
    """`lit-retrieval fit` imports the entry point, RetrievalCLI and the classes a config names;
    faiss (index/search) and PySceneDetect (shots) load only with the commands that need them."""
    modules = (
        "lit_retrieval.cli, lit_retrieval.retrieval_cli, lit_retrieval.data, lit_retrieval.models, "
        "lit_retrieval.modules, lit_retrieval.callbacks"
    )
    code = f"import sys, {modules}; print(sorted(m for m in ('faiss', 'scenedetect') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_import_check_fails_on_a_module_that_loads_faiss():
    """The subprocess check can fail: `lit_retrieval.search.index` does load faiss."""
    code = "import sys, lit_retrieval.search.index; print('faiss' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


# The tests mirror the package (tests/README.md): a folder of tests/ is a part of lit_retrieval/ or one of these
TESTS = PACKAGE.parent / "tests"
CROSS_CUTTING_TEST_FOLDERS = {"training", "repository", "robustness", "helpers", "fixtures"}
TEST_DATA_MODULES = {"robustness/cases.py", "robustness/files.py"}  # the robustness table, beside its one test


def tests_out_of_place(tests: Path = TESTS, package: Path = PACKAGE) -> list[str]:
    """Test folders that mirror no part of the package, Python files among the tests that are not
    `test_*.py`, and test files that import another test file (what tests share is in `helpers/`)."""
    problems = []
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir() and p.name != "__pycache__"):
        relative = folder.relative_to(tests)
        if relative.parts[0] in CROSS_CUTTING_TEST_FOLDERS:
            continue
        if not (package / relative).is_dir():
            problems.append(f"tests/{relative}/: no lit_retrieval/{relative}/ to mirror")
    for path in sorted(tests.rglob("*.py")):
        relative = path.relative_to(tests)
        if relative.parts[0] in ("helpers", "fixtures") or path.name in ("__init__.py", "conftest.py"):
            continue
        if not path.name.startswith("test_") and relative.as_posix() not in TEST_DATA_MODULES:
            problems.append(f"tests/{relative}: not a test file (shared code goes to tests/helpers/)")
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(n.rpartition(".")[2].startswith("test_") for n in names):
                problems.append(f"tests/{relative}:{node.lineno}: imports a test file")
    return problems


def test_the_tests_mirror_the_package():
    assert tests_out_of_place() == []


def test_the_mirror_check_catches_a_stray_folder_a_helper_and_a_test_import(tmp_path):
    package, tests = tmp_path / "lit_retrieval", tmp_path / "tests"
    (package / "data" / "media").mkdir(parents=True)
    (tests / "data" / "media").mkdir(parents=True)
    (tests / "datasets").mkdir()
    (tests / "data" / "media" / "test_video.py").write_text("from test_shots import SHOTS\n")
    (tests / "data" / "media" / "video_files.py").write_text("")
    assert tests_out_of_place(tests, package) == [
        "tests/datasets/: no lit_retrieval/datasets/ to mirror",
        "tests/data/media/test_video.py:1: imports a test file",
        "tests/data/media/video_files.py: not a test file (shared code goes to tests/helpers/)",
    ]


# The decoders' floor inside `data/media/` (docs/architecture.md, "The data layer"): `decoding.py` (the error
# type, the backend protocol and the names) imports no other media module; a backend imports of media only
# that floor; the sampler reaches a backend by name (`decoding.BACKENDS`), never by an import of it.
DECODING_FLOOR = "lit_retrieval.data.media.decoding"


def decoder_floor_problems(root: Path = PACKAGE) -> list[str]:
    """Imports that break the decoders' floor, as `file:line: module -> module`."""
    from lit_retrieval.data.media.decoding import BACKENDS

    media = root / "data" / "media"
    backends = {name.rpartition(".")[2] for name in BACKENDS.values()}
    problems = []
    for path in sorted(media.glob("*.py")):
        for target, line in imported_modules(path, root):
            if not target.startswith("lit_retrieval.data.media.") or target == module_name(path, root):
                continue
            floor_breach = path.stem == "decoding" or (path.stem in backends and target != DECODING_FLOOR)
            if floor_breach or target.rpartition(".")[2] in backends:
                problems.append(f"{path}:{line}: {module_name(path, root)} -> {target}")
    return problems


def test_the_decoders_stand_on_one_floor():
    assert decoder_floor_problems() == []


def test_the_decoder_floor_check_catches_a_loop(tmp_path):
    """The check itself: the loop the floor removed (sampler <-> backend) and a floor that climbs are refused."""
    media = tmp_path / "lit_retrieval" / "data" / "media"
    media.mkdir(parents=True)
    (media / "video.py").write_text("def f():\n    from lit_retrieval.data.media.torchcodec_decoder import g\n")
    (media / "torchcodec_decoder.py").write_text("from lit_retrieval.data.media.video import VideoDecodeError\n")
    (media / "decoding.py").write_text("from lit_retrieval.data.media.shots import x\n")
    root = tmp_path / "lit_retrieval"
    assert decoder_floor_problems(root) == [
        f"{media / 'decoding.py'}:1: lit_retrieval.data.media.decoding -> lit_retrieval.data.media.shots",
        f"{media / 'torchcodec_decoder.py'}:1: lit_retrieval.data.media.torchcodec_decoder -> "
        "lit_retrieval.data.media.video",
        f"{media / 'video.py'}:2: lit_retrieval.data.media.video -> lit_retrieval.data.media.torchcodec_decoder",
    ]
