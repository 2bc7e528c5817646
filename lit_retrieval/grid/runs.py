"""Run folders of a grid: the resolved config of each row x seed, its commands, and its state.

A run folder `RUNS_DIR/<row>/seed<k>/` holds
  config.yaml  the row's configs and overrides resolved by the real CLI parser (`fit --print_config`),
               with the seed and every path under the row's own run folder moved into this folder;
  run.json     the exact `lit-retrieval` commands of its steps (fit, then test or uvrb);
  fit.done     fit finished (exit 0), so a restarted task goes straight to the evaluation;
  done.json    written only after the evaluation's metrics file exists; names that file;
  failed.json  the step and exit status of the last failure (removed when the run completes);
  fit.log, test.log / uvrb.log: the commands' output, appended across attempts.
A finished run (done.json) is never run again; anything else runs again from where it stopped
(Lightning's hpc checkpoint after a Slurm requeue, else the newest last.ckpt).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from lit_retrieval.errors import UsageError
from lit_retrieval.grid.plan import Plan, Run

DONE, FIT_DONE, FAILED, RUN_FILE, CONFIG = "done.json", "fit.done", "failed.json", "run.json", "config.yaml"


def override_args(overrides: dict[str, Any]) -> list[str]:
    """`{key: value}` -> `--key VALUE` pairs for LightningCLI (non-strings as flow-style YAML)."""
    args = []
    for key, value in overrides.items():
        text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
        args += [f"--{key}", text.removesuffix("\n...").strip()]
    return args


class _ParserBuilt(Exception):
    """Carries the CLI's parser out of `LightningCLI.__init__` before it parses anything."""


@functools.cache
def cli_parser() -> Any:
    """The argument parser of `lit-retrieval fit/test/...` (RetrievalCLI's own), built once: building
    it costs as much as parsing a config, and a plan parses dozens."""
    from lit_retrieval.retrieval_cli import RetrievalCLI

    class ParserOnly(RetrievalCLI):
        def parse_arguments(self, parser, args) -> None:  # the hook LightningCLI calls after setup_parser
            raise _ParserBuilt(parser)

    try:
        ParserOnly(args=[])
    except _ParserBuilt as built:
        return built.args[0]
    raise RuntimeError("LightningCLI did not call parse_arguments")


def resolve_config(configs: list[str], overrides: dict[str, Any], where: str) -> dict[str, Any]:
    """The fit config that `lit-retrieval fit --config C1 --config C2 ... --KEY VALUE` would run,
    from the CLI's own parser (`--print_config`); a missing file or a parse error is a `UsageError`."""
    missing = [c for c in configs if not Path(c).is_file()]
    if missing:
        raise UsageError(where, f"config file(s) not found: {missing} (paths are relative to {Path.cwd()})")
    args = ["fit", *(a for c in configs for a in ("--config", c)), *override_args(overrides), "--print_config"]
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    parser = cli_parser()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            parser.parse_args(args)
        except SystemExit as exit_:
            code = exit_.code
        except Exception as error:  # noqa: BLE001 - reported with the row that caused it
            raise UsageError(where, f"the configs do not parse: {error}") from None
    if code not in (0, None):
        raise UsageError(where, f"the configs do not parse: {err.getvalue().strip().splitlines()[-1:]}")
    return yaml.safe_load(out.getvalue())


def relocate(config: dict[str, Any], run_dir: Path, seed: int) -> dict[str, Any]:
    """`config` with `seed_everything = seed` and the row's run folder (trainer.default_root_dir and
    the logger's save_dir; e.g. `runs/melon_xclip_mea`) replaced by `run_dir` in every path under
    it (checkpoint dirpath, ...), so the seeds of a row never share a folder."""
    trainer = config.setdefault("trainer", {})
    logger = trainer.get("logger")
    logger_args = logger.get("init_args", {}) if isinstance(logger, dict) else {}
    old = {
        str(p).rstrip("/")
        for p in (trainer.get("default_root_dir"), logger_args.get("save_dir"))
        if p not in (None, "", ".")
    }
    new = str(run_dir)

    def move(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: move(v) for k, v in value.items()}
        if isinstance(value, list):
            return [move(v) for v in value]
        if isinstance(value, str):
            for prefix in sorted(old, key=len, reverse=True):
                if value == prefix or value.startswith(prefix + "/"):
                    return new + value[len(prefix) :]
        return value

    moved = move(config)
    moved["seed_everything"] = seed
    moved["trainer"]["default_root_dir"] = new
    if isinstance(moved["trainer"].get("logger"), dict) and "save_dir" in moved["trainer"]["logger"].get(
        "init_args", {}
    ):
        moved["trainer"]["logger"]["init_args"]["save_dir"] = new
    return moved


def commands(plan: Plan, run: Run, folder: Path, config: dict[str, Any] | None) -> dict[str, Any]:
    """The `lit-retrieval` argument lists of the run's steps; the checkpoint is added when it runs."""
    row = run.row
    fit = None if config is None else ["fit", "--config", str(folder / CONFIG)]
    if plan.evaluate == "uvrb":
        source = ["--model", row.model] if row.model else ["--config", str(folder / CONFIG)]
        evaluate = ["uvrb", *source, "--tasks", plan.uvrb_tasks, "--out", str(folder / "uvrb"), *plan.uvrb_args]
        return {
            "fit": fit,
            "evaluate": evaluate,
            "kind": "uvrb",
            "ckpt_flag": None if row.model else "--ckpt",
            "checkpoint": plan.checkpoint,
        }
    logger = (config or {}).get("trainer", {}).get("logger")
    version = (
        ["--trainer.logger.init_args.version", "test"]
        if isinstance(logger, dict) and "version" in logger.get("init_args", {})
        else []
    )
    evaluate = [
        "test",
        "--config",
        str(folder / CONFIG),
        *(a for c in row.test_configs for a in ("--config", c)),
        *override_args(row.test_overrides),
        *version,
    ]
    return {"fit": fit, "evaluate": evaluate, "kind": "test", "ckpt_flag": "--ckpt_path", "checkpoint": plan.checkpoint}


def prepare(
    plan: Plan, run: Run, runs_dir: Path, extra: dict[str, Any], resolved: dict[str, Any], write: bool = True
) -> dict[str, Any]:
    """Resolve the run's config (once per row: `resolved` caches it by row name) and commands; with
    `write`, store them in its folder (config.yaml, run.json). Finished runs keep what they ran with."""
    folder = run.folder(runs_dir)
    config = None
    if run.row.trains:
        if run.row.name not in resolved:
            overrides = {
                k: v.replace("{runs}", str(runs_dir)) if isinstance(v, str) else v
                for k, v in {**run.row.overrides, **extra}.items()
            }
            resolved[run.row.name] = resolve_config(run.row.configs, overrides, f"{plan.path}: row {run.row.name!r}")
        config = relocate(copy.deepcopy(resolved[run.row.name]), folder, run.seed)
    steps = commands(plan, run, folder, config)
    if write and not (folder / DONE).exists():
        folder.mkdir(parents=True, exist_ok=True)
        if config is not None:
            (folder / CONFIG).write_text(
                f"# {plan.title}: row {run.row.name}, seed {run.seed} (written by lit-retrieval grid)\n"
                + yaml.safe_dump(config, sort_keys=False)
            )
        (folder / RUN_FILE).write_text(
            json.dumps({"row": run.row.name, "seed": run.seed, "index": run.index, **steps}, indent=2)
        )
    return steps


def status(folder: Path) -> str:
    """`done`, `failed` (last attempt exited non-zero) or `pending` (never run, or interrupted)."""
    if (folder / DONE).exists():
        return "done"
    return "failed" if (folder / FAILED).exists() else "pending"


def _is_rank_zero() -> bool:
    """Under `srun` with several tasks per run, only task 0 writes the markers."""
    return os.environ.get("SLURM_PROCID", "0") == "0"


def _step(args: list[str], log: Path) -> int:
    with log.open("a") as out:
        out.write(f"\n$ lit-retrieval {' '.join(args)}  # {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        out.flush()
        return subprocess.run(
            [sys.executable, "-m", "lit_retrieval", *args], stdout=out, stderr=subprocess.STDOUT
        ).returncode


def _newest(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.rglob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _fail(folder: Path, step: str, code: int) -> int:
    if _is_rank_zero():
        (folder / FAILED).write_text(json.dumps({"step": step, "exit_status": code, "time": time.time()}))
    return code or 1


def execute(folder: Path) -> int:
    """Run (or finish) one prepared run: fit unless fit.done, then the evaluation; done.json only
    once the evaluation's metrics file exists. Returns the first non-zero exit status, else 0."""
    steps = json.loads((folder / RUN_FILE).read_text())
    if (folder / DONE).exists():
        return 0
    if steps["fit"] and not (folder / FIT_DONE).exists():
        fit = list(steps["fit"])
        last = _newest(folder, "last*.ckpt")
        if last is not None and not any(folder.glob("hpc_ckpt_*.ckpt")):  # Lightning resumes an hpc checkpoint itself
            fit += ["--ckpt_path", str(last)]
        code = _step(fit, folder / "fit.log")
        if code:
            return _fail(folder, "fit", code)
        if _is_rank_zero():
            (folder / FIT_DONE).write_text("")
    evaluate = list(steps["evaluate"])
    if steps["fit"]:
        checkpoint = _newest(folder, steps["checkpoint"])
        if checkpoint is None:
            return _fail(folder, f"checkpoint (no {steps['checkpoint']} in {folder})", 1)
        evaluate += [steps["ckpt_flag"], str(checkpoint)]
    started = time.time()
    code = _step(evaluate, folder / f"{steps['kind']}.log")
    if code:
        return _fail(folder, steps["kind"], code)
    metrics = _metrics_file(folder, steps["kind"], started)
    if metrics is None:
        return _fail(folder, f"{steps['kind']} (no metrics file)", 1)
    if _is_rank_zero():
        (folder / DONE).write_text(json.dumps({"metrics": str(metrics.relative_to(folder)), "time": time.time()}))
        (folder / FAILED).unlink(missing_ok=True)
    return 0


def _metrics_file(folder: Path, kind: str, since: float) -> Path | None:
    """The evaluation's output written after `since`: uvrb/results.json, or the metrics.json with a
    `test` section (in the test logger's folder)."""
    if kind == "uvrb":
        path = folder / "uvrb" / "results.json"
        return path if path.is_file() and path.stat().st_mtime >= since - 1 else None
    fresh = [
        p
        for p in folder.rglob("metrics.json")
        if p.stat().st_mtime >= since - 1 and "test" in json.loads(p.read_text())
    ]
    return max(fresh, key=lambda p: p.stat().st_mtime) if fresh else None


def run_metrics(folder: Path) -> dict[str, float]:
    """A finished run's metrics as one flat mapping: the `test` section of metrics.json
    (`t2v/R@1`, ...), or UVRB's per-dataset scores and ability aggregates (`MSRVTT`, `AVG_datasets`)."""
    path = folder / json.loads((folder / DONE).read_text())["metrics"]
    raw = json.loads(path.read_text())
    if "test" in raw:
        return {k: float(v) for k, v in raw["test"].items() if isinstance(v, (int, float))}
    scores = {name: float(entry["score"]) for name, entry in raw.get("datasets", {}).items() if "score" in entry}
    return {**scores, **{k: float(v) for k, v in raw.get("abilities", {}).items()}}
