"""The documentation names only files that exist, and nothing cites a document outside the repository.

Paths are read from the backticked spans and fenced code blocks of README.md, docs/*.md,
docs/slurm.md and configs/**/README.md. A token counts as a repository path when it ends in a
file extension of the project (e.g. `configs/quickstart.yaml`, `tests/helpers/media.py`) or starts with a
top-level folder of the repository (`benchmarks/`, `configs/sali/grid/`). It must exist relative to
the repository root, or relative to `lit_retrieval/` (docs/architecture.md names modules by their
path inside the package, e.g. `data/video.py`). Placeholders (`<name>`, `$VAR`, `RUN_DIR/...`) and
absolute paths of the user's machine are not checked; files that runs write are listed below with
their reason. A file of another repository is named with its repository, `owner/repo:path/file.py`
(or as a URL), so that it is not taken for one of ours.
"""

from __future__ import annotations

import ast
import fnmatch
import itertools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "lit_retrieval"
DOC_FILES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("configs/**/README.md")])
EXTENSIONS = {".py", ".yaml", ".yml", ".md", ".sh", ".json", ".jsonl", ".sbatch", ".png", ".csv", ".toml", ".txt"}
SKIPPED_DIRS = {".git", ".venv", "runs", "data", "cache", "__pycache__", "lit_retrieval.egg-info"}
PACKAGE_DIRS = {"data"}  # skipped at the repository's top only

# Folders that only runs create (the quick start, `lit-retrieval synth`, shot caches): a doc may name
# files in them, e.g. `runs/quickstart/logs/test/metrics.json`, that do not exist in a fresh clone.
GENERATED_DIRS = {"runs", "data", "cache"}
# ... but never sources: `data/tasks.py` or `data/melon.yaml` must be a file of the repository
SOURCE_EXTENSIONS = {".py", ".yaml", ".yml", ".md", ".sh", ".sbatch", ".toml"}
# File names that runs write (metrics, results, caches, task files, figures of a run) or that
# belong to a dataset's own release; a doc names them without a folder.
RUN_OUTPUT_NAMES = {
    "shards.json",  # lit-retrieval shard: a shard folder's manifest
    "index.json",  # litdata: a shard split's index of chunks
    "metrics.json",  # MetricsReport, every validate/test
    "metrics.csv",  # Lightning's CSVLogger
    "hparams.yaml",
    "scores.npy",  # RetrievalEvaluator, test with save_scores
    "scores_ids.json",
    "training_curves.json",  # TrainingCurves
    "training_curves.png",
    "modality_pyramid.json",  # ModalityPyramid
    "modality_pyramid.png",
    "results.json",  # lit-retrieval uvrb
    "per_query.json",
    "done.json",  # lit-retrieval grid: a run folder's markers and commands, the runs folder's plan
    "run.json",
    "grid.json",
    "submissions.jsonl",
    "slurm.json",
    "report.md",  # lit-retrieval report
    "report.csv",
    "report.png",
    "results.md",
    "results.png",
    "failed.json",  # lit-retrieval index
    "shots.json",  # lit-retrieval shots --out
    "annotations.json",  # lit-retrieval synth
    "events.json",
    "corpus.jsonl",  # UVRB task layout (uvrb/tasks.py)
    "queries.jsonl",
    "qrels.jsonl",
    "config.yaml",  # LightningCLI's saved config of a run
    "config.json",  # a Hugging Face model directory (tiny-qwen, save_merged, the GVE export)
    "head_config.json",  # export-dual-encoder (modules/export.py), beside open_clip's own config
    "open_clip_config.json",
    "preprocessor_config.json",
    "video_preprocessor_config.json",
    "tokenizer_config.json",
    "tokenizer.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.json",
    "adapter_config.json",  # peft's save_adapter
    "clips.csv",  # Condensed Movies release (metadata/)
    "descriptions.csv",
    "durations.csv",
    "split.csv",
    "val_2.json",  # ActivityNet Captions release
    "metadata.csv",  # a Hugging Face Hub video dataset's table (TableDataModule)
    "table.csv",  # lit-retrieval synth --table csv
}
FORBIDDEN_CITATIONS = re.compile(r"DESIGN\.md|formats\s+spec|baselines(-B)?\s+spec|GVE\s+spec", re.IGNORECASE)

SPAN = re.compile(r"`([^`\n]+)`")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
STRIP = "\"'()[],;:.!?"


def top_level_dirs() -> set[str]:
    return {p.name for p in ROOT.iterdir() if p.is_dir() and p.name not in SKIPPED_DIRS} | {"lit_retrieval"}


def repository_file_names() -> set[str]:
    names = set()
    for folder, dirs, files in os.walk(ROOT):
        # a run's outputs (runs/, data/, cache/ at the top) are skipped, not the package's own data/
        dirs[:] = [d for d in dirs if d not in SKIPPED_DIRS or (d in PACKAGE_DIRS and folder != str(ROOT))]
        names.update(files)
    return names


def expand_braces(token: str) -> list[str]:
    """`a_{x,y}{,_z}.yaml` -> the four names, as a shell expands them."""
    parts = re.split(r"(\{[^{}]*\})", token)
    choices = [p[1:-1].split(",") if p.startswith("{") and p.endswith("}") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def is_placeholder(token: str) -> bool:
    if any(mark in token for mark in ("<", ">", "$", "...", ":", "@", "|", "=")):
        return True
    stems = [Path(part).stem for part in token.split("/") if part]
    return any(stem.isupper() and stem not in ("README", "LICENSE") for stem in stems)


def candidate_paths(text: str, top: set[str]) -> list[str]:
    """Tokens of `text`'s backticked spans and code blocks that name repository paths; files a
    command of the same text writes (`--out FILE`) are outputs, not repository paths."""
    chunks = SPAN.findall(FENCE.sub("", text)) + FENCE.findall(text)
    tokens = [t.strip(STRIP) for chunk in chunks for t in chunk.split()]
    outputs = {after for before, after in zip(tokens, tokens[1:]) if before == "--out"}
    found = []
    for token in tokens:
        if not token or token in outputs or token.startswith(("-", "/", "~", "#")) or is_placeholder(token):
            continue
        head = token.split("/")[0]
        has_extension = Path(token.rstrip("/")).suffix in EXTENSIONS
        if has_extension or ("/" in token and head in top):
            found.append(token)
    return found


def path_exists(token: str, file_names: set[str]) -> bool:
    # dataset releases are named in their own layout (`metadata/clips.csv`), which tests/fixtures copies
    fixtures = [p for p in (ROOT / "tests" / "fixtures").iterdir() if p.is_dir()]
    for name in expand_braces(token):
        if "/" not in name:
            if name in RUN_OUTPUT_NAMES or any(fnmatch.fnmatch(f, name) for f in file_names):
                continue
            return False
        for base in (ROOT, PACKAGE, *fixtures):
            if "*" in name and any(base.glob(name)):
                break
            if "*" not in name and (base / name).exists():
                break
        else:
            generated = Path(name).suffix not in SOURCE_EXTENSIONS or Path(name).name in RUN_OUTPUT_NAMES
            if name.split("/")[0] in GENERATED_DIRS and generated:  # e.g. a run's saved runs/.../config.yaml
                continue
            return False
    return True


def missing_paths(text: str) -> list[str]:
    names = repository_file_names()
    return sorted({t for t in candidate_paths(text, top_level_dirs()) if not path_exists(t, names)})


@pytest.mark.parametrize("doc", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_in_the_docs_exists(doc):
    assert doc.is_file(), f"{doc} is missing"
    assert missing_paths(doc.read_text()) == []


def test_the_path_check_catches_a_bogus_path_and_accepts_real_ones():
    text = (
        "See `lit_retrieval/models/gve/loading.py`, `configs/gve/gve_3b.yaml`, `docs/nothing.md` and\n"
        "```bash\nlit-retrieval fit --config configs/melon/missing.yaml\n```\n"
        "but `lit_retrieval/data/media/video.py`, `data/media/video.py`, `configs/strategy/{ddp,bf16}.yaml`,\n"
        "`ArrowLuo/CLIP4Clip:modules/module_cross.py`, `data/melon.yaml`,\n"
        "`runs/x/logs/test/metrics.json`, `<dir>/corpus.jsonl`, `train/mea/*` and `metrics.json` are fine."
    )
    assert missing_paths(text) == [
        "configs/gve/gve_3b.yaml",
        "configs/melon/missing.yaml",
        "data/melon.yaml",
        "docs/nothing.md",
        "lit_retrieval/models/gve/loading.py",
    ]


def test_no_doc_or_docstring_cites_a_document_outside_the_repository():
    sources = [*DOC_FILES, *ROOT.glob("slurm/*"), *ROOT.glob("configs/**/*.yaml")]
    for folder in ("lit_retrieval", "tests", "benchmarks", "sweeps"):
        sources += [p for p in (ROOT / folder).rglob("*.py") if p != Path(__file__).resolve()]
    hits = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in sources
        if path.is_file()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if FORBIDDEN_CITATIONS.search(line)
    ]
    assert hits == []


def docstring_paths(path: Path, rooms: set[str]) -> list[str]:
    """The repository paths the docstrings of a module name: tokens that start with a top-level folder
    or a sub-package of `lit_retrieval` (`data/batching/workers.py`), the form a moved module leaves
    stale. A file a run writes (`uvrb/per_query.json`) is an output, not a path; files of other
    repositories are named with their repository (module docstring) and not checked here."""
    top = top_level_dirs() | rooms
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            text = ast.get_docstring(node) or ""
            found += [
                t
                for t in candidate_paths(text, top)
                if "/" in t and t.split("/")[0] in top and Path(t).name not in RUN_OUTPUT_NAMES
            ]
    return found


def test_every_package_path_named_in_a_docstring_exists():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_")}
    names = repository_file_names()
    stale = [
        f"{path.relative_to(ROOT)}: {token}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for token in docstring_paths(path, rooms)
        if not path_exists(token, names)
    ]
    assert stale == []


def test_the_docstring_check_catches_a_moved_module(tmp_path):
    module = tmp_path / "moved.py"
    module.write_text('"""Workers ignore the stop signals (`data/workers.py`, `data/batching/workers.py`)."""\n')
    rooms = {"data"}
    tokens = docstring_paths(module, rooms)
    assert tokens == ["data/workers.py", "data/batching/workers.py"]
    assert [t for t in tokens if not path_exists(t, repository_file_names())] == ["data/workers.py"]


@pytest.mark.parametrize("page", ["docs/melon.md", "docs/gve.md", "docs/sali.md"])
def test_every_method_page_keeps_the_papers_numbers_apart_from_ours(page):
    """Issue 58: each method page says which numbers are the paper's (and where they are kept) and which are
    measured here; the SALI page says that its Condensed Movies split is not published."""
    text = (ROOT / page).read_text()
    assert "**Which numbers are whose" in text
    paragraph = text[text.index("**Which numbers are whose") :].split("\n\n")[0]
    assert "benchmarks.md" in paragraph and ("published" in paragraph or "configs/plans/published/" in paragraph)
    if page == "docs/sali.md":
        assert "**Condensed Movies: the paper's split is not published.**" in text


def test_the_readme_is_a_landing_page():
    """Issue 53: the README stays under 14 kB (detail lives in docs/), links every page of docs/, shows the two
    set-up commands it announces, and names every subcommand the CLI lists."""
    from lit_retrieval.commands import COMMANDS

    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 14_000
    assert [p.name for p in sorted(ROOT.glob("docs/*.md")) if f"(docs/{p.name}" not in readme] == []
    assert "make quickstart" in readme and "make test" in readme and "make test" in (ROOT / ".ci" / "run").read_text()
    assert [c for c in COMMANDS if f"`{c}`" not in readme and f"`{c} " not in readme] == []
