"""Run folders of a grid: the resolved config of each row x seed, its commands, and its state.

A run folder `RUNS_DIR/<row>/seed<k>/` holds
  config.yaml  the row's configs and overrides resolved by the real CLI parser (`fit --print_config`),
               with the seed and every path under the row's own run folder moved into this folder;
  run.json     the exact `lit-retrieval` commands of its steps (fit, then test or uvrb); a row that
               `evaluates` another has no fit and names the trained run folder it tests (`source`);
  fit.done     fit finished (exit 0), so a restarted task goes straight to the evaluation;
  done.json    written only after the evaluation's metrics file exists; names that file and the
               checkpoint it evaluated;
  failed.json  the step and exit status of the last failure (removed when the run completes);
  slurm.json   the Slurm array task that was last submitted for it (`lit-retrieval grid --slurm`);
  .run.lock    held while one process runs it (`RunLock`: a second writer is refused);
  converted/   a DeepSpeed checkpoint directory consolidated into one file for the evaluation;
  fit.log, test.log / uvrb.log: the commands' output, appended across attempts.
Every state file is written whole (a temporary file renamed over it). A run is finished when its
done.json is whole and what it names still exists; anything else runs again from where it stopped:
fit resumes with `--ckpt_path newest` (the newest of Lightning's hpc checkpoints and last.ckpt), and
a fitted run whose metrics file is gone is evaluated again.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Protocol

import yaml

from lit_retrieval.errors import InputError, UsageError
from lit_retrieval.grid.plan import Plan, Run
from lit_retrieval.locking import OutputLock, OutputLocked
from lit_retrieval.progress import Progress
from lit_retrieval.run_folder import moved as move_paths

DONE, FIT_DONE, FAILED, RUN_FILE, CONFIG = "done.json", "fit.done", "failed.json", "run.json", "config.yaml"
GRID_RECORD = "grid.json"  # RUNS_DIR/grid.json: the plan a runs folder was made from
CONVERTED = "converted"


def write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` whole or not at all: a temporary file in the same folder, renamed over it."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(text)
    os.replace(partial, path)


def read_json_file(path: Path, what: str) -> Any:
    """The JSON of a file this package wrote; an empty, truncated or non-UTF-8 one is a `UsageError`."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(str(path), f"{what} is not UTF-8 text (a damaged file)") from None
    except OSError as err:
        raise UsageError(str(path), f"cannot read the {what} ({err.strerror or err})") from None
    if not text.strip():
        raise UsageError(str(path), f"empty {what} (an interrupted write?)")
    try:
        return json.loads(text)
    except ValueError as err:
        raise UsageError(str(path), f"{what} is not valid JSON ({err}); a truncated file?") from None


def read_object(path: Path, what: str) -> dict[str, Any]:
    raw = read_json_file(path, what)
    if not isinstance(raw, dict):
        raise UsageError(str(path), f"{what} must be a JSON object, got a {type(raw).__name__}")
    return raw


def override_args(overrides: dict[str, Any]) -> list[str]:
    """`{key: value}` -> `--key VALUE` pairs for LightningCLI (non-strings as flow-style YAML)."""
    args = []
    for key, value in overrides.items():
        text = value if isinstance(value, str) else yaml.safe_dump(value, default_flow_style=True).strip()
        args += [f"--{key}", text.removesuffix("\n...").strip()]
    return args


def relocate(config: dict[str, Any], run_dir: Path, seed: int, seed_keys: list[str] = ()) -> dict[str, Any]:
    """`config` with `seed_everything = seed` (and each dotted key of `seed_keys`, which must be in
    the config) and the row's run folder (trainer.default_root_dir and the logger's save_dir; e.g.
    `runs/melon_xclip_mea`) replaced by `run_dir` in every path under it (checkpoint dirpath, ...),
    so the seeds of a row never share a folder."""
    trainer = config.setdefault("trainer", {})
    logger = trainer.get("logger")
    logger_args = logger.get("init_args", {}) if isinstance(logger, dict) else {}
    old = {
        str(p).rstrip("/")
        for p in (trainer.get("default_root_dir"), logger_args.get("save_dir"))
        if p not in (None, "", ".")
    }
    new = str(run_dir)
    moved = move_paths(config, old, new)
    moved["seed_everything"] = seed
    for key in seed_keys:
        *parents, last = key.split(".")
        holder = moved
        for part in parents:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or last not in holder:
            raise UsageError(str(run_dir), f"seed_keys: {key!r} is not a key of the run's resolved config")
        holder[last] = seed
    moved["trainer"]["default_root_dir"] = new
    if isinstance(moved["trainer"].get("logger"), dict) and "save_dir" in moved["trainer"]["logger"].get(
        "init_args", {}
    ):
        moved["trainer"]["logger"]["init_args"]["save_dir"] = new
    return moved


def commands(plan: Plan, run: Run, folder: Path, config: dict[str, Any] | None) -> dict[str, Any]:
    """The `lit-retrieval` argument lists of the run's steps; the checkpoint is added when it runs."""
    row = run.row
    fit = None if config is None or not row.trains else ["fit", "--config", str(folder / CONFIG)]
    trained_run = {"source": str(folder.parent.parent / row.evaluates / folder.name)} if row.evaluates else {}
    if plan.evaluate == "uvrb":
        source = ["--model", row.model] if row.model else ["--config", str(folder / CONFIG)]
        evaluate = ["uvrb", *source, "--tasks", plan.uvrb_tasks, "--out", str(folder / "uvrb"), *plan.uvrb_args]
        return {
            "fit": fit,
            "evaluate": evaluate,
            "kind": "uvrb",
            "ckpt_flag": None if row.model else "--ckpt",
            "checkpoint": plan.checkpoint,
            **trained_run,
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
    steps = {
        "fit": fit,
        "evaluate": evaluate,
        "kind": "test",
        "ckpt_flag": "--ckpt_path",
        "checkpoint": plan.checkpoint,
    }
    return {**steps, **trained_run}


def row_config(plan: Plan, run: Run, runs_dir: Path, extra: dict[str, Any], resolved: dict[str, Any]) -> dict | None:
    """The row's fit config as the CLI resolves it (None for a row that evaluates a `model`; the
    trained row's for one that `evaluates` it), once per row: `resolved` caches it by row name (a
    caller may adjust it there before `prepare`)."""
    row = plan.row(run.row.evaluates) if run.row.evaluates else run.row
    if row.model is not None:
        return None
    if row.name not in resolved:
        from lit_retrieval.callbacks.prober import config_lacks_prober  # the models' code, as resolving loads it
        from lit_retrieval.retrieval_cli import resolved_training_config  # Lightning: only where a row trains

        overrides = {
            k: v.replace("{runs}", str(runs_dir)) if isinstance(v, str) else v
            for k, v in {**row.overrides, **extra}.items()
        }
        where = f"{plan.path}: row {row.name!r}"
        resolved[row.name] = resolved_training_config(row.configs, override_args(overrides), where)
        lacking = config_lacks_prober(resolved[row.name])
        if lacking:  # its fit would refuse to start on the cluster
            raise UsageError(where, f"{lacking} (--override data.init_args.prober_path=DIR)")
    return resolved[row.name]


def prepare(
    plan: Plan, run: Run, runs_dir: Path, extra: dict[str, Any], resolved: dict[str, Any], write: bool = True
) -> dict[str, Any]:
    """Resolve the run's config (`row_config`) and commands; with `write`, store them in its folder
    (config.yaml, run.json). Finished runs keep what they ran with."""
    folder = run.folder(runs_dir)
    base = row_config(plan, run, runs_dir, extra, resolved)
    config = None if base is None else relocate(copy.deepcopy(base), folder, run.seed, plan.seed_keys)
    steps = commands(plan, run, folder, config)
    if write and status(folder) != "done":
        folder.mkdir(parents=True, exist_ok=True)
        if config is not None:
            write_atomic(
                folder / CONFIG,
                f"# {plan.title}: row {run.row.name}, seed {run.seed} (written by lit-retrieval grid)\n"
                + yaml.safe_dump(config, sort_keys=False),
            )
        record = {"row": run.row.name, "seed": run.seed, "index": run.index, **steps}
        write_atomic(folder / RUN_FILE, json.dumps(record, indent=2))
    return steps


def read_done(folder: Path) -> dict[str, Any]:
    """The run's done.json, checked: a JSON object naming its metrics file (and the checkpoint it
    evaluated), both of which still exist; anything else is a `UsageError` saying what is wrong."""
    path = folder / DONE
    done = read_object(path, "done.json")
    if not isinstance(done.get("metrics"), str):
        raise UsageError(str(path), "done.json names no metrics file ('metrics')")
    for key in ("metrics", "checkpoint"):
        if isinstance(done.get(key), str) and not (folder / done[key]).exists():
            raise UsageError(str(path), f"names {key} {done[key]} that is gone; `lit-retrieval grid` runs it again")
    return done


def status(folder: Path) -> str:
    """`done` (a done.json that `read_done` trusts), `failed` (the last attempt exited non-zero) or
    `pending` (never run, interrupted, or a done.json that cannot be trusted: it is run again)."""
    if (folder / DONE).exists():
        try:
            read_done(folder)
            return "done"
        except InputError:
            pass
    return "failed" if (folder / FAILED).exists() else "pending"


class TaskQueue(Protocol):
    """The scheduler whose tasks may hold a run folder (Slurm's: `lit_retrieval.launch.queue.SlurmQueue`)."""

    def current_task(self) -> str | None:
        """The scheduler task this process runs in (Slurm: `ARRAYJOB_TASK`), else None."""

    def task_ended(self, task: str) -> bool:
        """Whether the scheduler no longer holds `task`; False when it cannot be asked."""


class NoQueue:
    """No scheduler: a run folder's lock is judged by host and pid alone."""

    def current_task(self) -> str | None:
        return None

    def task_ended(self, task: str) -> bool:
        return False


class RunLock(OutputLock):
    """One process runs a run folder at a time (`.run.lock`). Under a scheduler (`queue`) the holder
    also records its task (`slurm`), which frees a lock whose holder a host-and-pid check cannot judge
    (it ran on another node): a requeued task (the same array job and task id) takes over its own
    earlier attempt's lock, and any task takes over the lock of a task that the scheduler no longer
    holds (cancelled, or killed at its time limit)."""

    def __init__(self, folder: Path, queue: TaskQueue | None = None) -> None:
        super().__init__(folder, name="run")
        self.queue = queue or NoQueue()

    def _me(self) -> dict[str, Any]:
        return {**super()._me(), "slurm": self.queue.current_task()}

    def _stale(self, holder: dict[str, Any], host: str) -> bool:
        task = holder.get("slurm")
        if isinstance(task, str) and (task == self.queue.current_task() or self.queue.task_ended(task)):
            return True
        return super()._stale(holder, host)


def _step(args: list[str], log: Path, launcher: list[str]) -> int:
    command = [*launcher, sys.executable, "-m", "lit_retrieval", *args]
    with log.open("a") as out:
        out.write(f"\n$ {' '.join(launcher + ['lit-retrieval', *args])}  # {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        out.flush()
        return subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode


def _newest(folder: Path, pattern: str) -> Path | None:
    """The newest (by mtime) `pattern` match under `folder`, leaving out what `converted/` holds."""
    found = [p for p in folder.rglob(pattern) if CONVERTED not in p.relative_to(folder).parts[:1]]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def _fail(folder: Path, step: str, code: int) -> int:
    """Record the failed step in `failed.json`, with the Slurm job it ran in (`slurm_job`: grid.sbatch finds
    the task's run folder by it, to requeue a task whose step died past a checkpoint), and return its status."""
    failed = {"step": step, "exit_status": code, "time": time.time(), "slurm_job": os.environ.get("SLURM_JOB_ID")}
    write_atomic(folder / FAILED, json.dumps(failed))
    return code or 1


def _uses_deepspeed(folder: Path) -> bool:
    config = yaml.safe_load((folder / CONFIG).read_text()) if (folder / CONFIG).is_file() else None
    strategy = ((config or {}).get("trainer") or {}).get("strategy")
    return "deepspeed" in json.dumps(strategy).lower()


def _evaluable(folder: Path, checkpoint: Path, kind: str) -> tuple[Path | None, int]:
    """The checkpoint the evaluation reads: a DeepSpeed checkpoint directory is consolidated into
    `converted/<name>` with `lit-retrieval convert-checkpoint` (once) unless the evaluation is a
    `test` under the same DeepSpeed strategy, which reads the directory itself. (path, 0) or (None, exit status)."""
    if not checkpoint.is_dir() or (kind == "test" and _uses_deepspeed(folder)):
        return checkpoint, 0
    out = folder / CONVERTED / checkpoint.name
    if out.is_file() and out.stat().st_mtime >= max(p.stat().st_mtime for p in [checkpoint, *checkpoint.rglob("*")]):
        return out, 0
    out.parent.mkdir(exist_ok=True)
    code = _step(["convert-checkpoint", str(checkpoint), str(out)], folder / "convert.log", [])
    return (out, 0) if code == 0 else (None, code)


def execute(folder: Path, launcher: list[str] | None = None, queue: TaskQueue | None = None) -> int:
    """Run (or finish) one prepared run under its `RunLock`: fit unless fitted, then the evaluation;
    done.json only once the evaluation's metrics file exists. `launcher` (e.g. `srun
    --kill-on-bad-exit=1`) starts `fit` and `test` over the job's ranks; this process alone judges
    what is left, writes the state files and runs `uvrb`. Returns the first non-zero exit status,
    else 0; a run folder another process runs is an `OutputLocked` error."""
    with RunLock(folder, queue):
        return _execute(folder, list(launcher or []))


def _execute(folder: Path, launcher: list[str]) -> int:
    steps = read_object(folder / RUN_FILE, "run.json")
    if status(folder) == "done":
        return 0
    (folder / DONE).unlink(missing_ok=True)  # one that cannot be trusted is written again below
    evaluate = list(steps["evaluate"])
    checkpoint, home = None, folder  # home: the run folder holding the checkpoint
    if steps.get("source"):  # a row that tests another row's checkpoint
        home = Path(steps["source"])
        checkpoint = _newest(home, steps["checkpoint"]) if (home / FIT_DONE).exists() else None
        if checkpoint is None:
            return _fail(folder, f"checkpoint (the run it evaluates, {home}, is not fitted yet)", 1)
    elif steps["fit"]:
        checkpoint = _newest(folder, steps["checkpoint"])
        if not (folder / FIT_DONE).exists() or checkpoint is None:
            (folder / FIT_DONE).unlink(missing_ok=True)
            code = _step([*steps["fit"], "--ckpt_path", "newest"], folder / "fit.log", launcher)
            if code:
                return _fail(folder, "fit", code)
            write_atomic(folder / FIT_DONE, "")
            checkpoint = _newest(folder, steps["checkpoint"])
        if checkpoint is None:
            return _fail(folder, f"checkpoint (no {steps['checkpoint']} in {folder})", 1)
    if checkpoint is not None:
        readable, code = _evaluable(home, checkpoint, steps["kind"])
        if readable is None:
            return _fail(folder, "convert-checkpoint", code)
        evaluate += [steps["ckpt_flag"], str(readable)]
    started = time.time()
    code = _step(evaluate, folder / f"{steps['kind']}.log", launcher if steps["kind"] == "test" else [])
    if code:
        return _fail(folder, steps["kind"], code)
    metrics = _metrics_file(folder, steps["kind"], started)
    if metrics is None:
        return _fail(folder, f"{steps['kind']} (no metrics file)", 1)
    done = {
        "metrics": str(metrics.relative_to(folder)),
        "checkpoint": None if checkpoint is None else os.path.relpath(checkpoint, folder),
        "time": time.time(),
    }
    write_atomic(folder / DONE, json.dumps(done))
    (folder / FAILED).unlink(missing_ok=True)
    return 0


def _has_test_section(path: Path) -> bool:
    try:
        return "test" in read_object(path, "metrics.json")
    except InputError:
        return False


def _metrics_file(folder: Path, kind: str, since: float) -> Path | None:
    """The evaluation's output written after `since`: uvrb/results.json, or the metrics.json with a
    `test` section (in the test logger's folder)."""
    if kind == "uvrb":
        path = folder / "uvrb" / "results.json"
        return path if path.is_file() and path.stat().st_mtime >= since - 1 else None
    fresh = [p for p in folder.rglob("metrics.json") if p.stat().st_mtime >= since - 1 and _has_test_section(p)]
    return max(fresh, key=lambda p: p.stat().st_mtime) if fresh else None


def _numbers(raw: Any, path: Path, where: str) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise UsageError(str(path), f"'{where}' must be a JSON object of metrics, got {type(raw).__name__}")
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def run_metrics(folder: Path) -> dict[str, float]:
    """A finished run's metrics as one flat mapping: the `test` section of metrics.json
    (`t2v/R@1`, ...), or UVRB's per-dataset scores and ability aggregates (`MSRVTT`, `AVG_datasets`).
    A done.json or metrics file that cannot be trusted is a `UsageError` naming it."""
    path = folder / read_done(folder)["metrics"]
    raw = read_object(path, "metrics file")
    if "test" in raw:
        return _numbers(raw["test"], path, "test")
    datasets = raw.get("datasets", {})
    if not isinstance(datasets, dict) or not all(isinstance(e, dict) for e in datasets.values()):
        raise UsageError(str(path), "'datasets' must be a JSON object {dataset: {\"score\": ...}}")
    scores = _numbers({name: entry.get("score") for name, entry in datasets.items()}, path, "datasets")
    return {**scores, **_numbers(raw.get("abilities", {}), path, "abilities")}


def record_plan(runs_dir: Path, plan: Plan) -> None:
    """RUNS_DIR/grid.json names the plan, so `report RUNS_DIR` finds its rows, seeds and metrics."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    record = {"plan": str(plan.path.resolve()), "title": plan.title}
    write_atomic(runs_dir / GRID_RECORD, json.dumps(record, indent=2))


def recorded_plan(runs_dir: Path) -> str:
    """The plan file RUNS_DIR/grid.json names; a `UsageError` when there is none."""
    record = runs_dir / GRID_RECORD
    if not record.is_file():
        raise UsageError(str(runs_dir), f"no {GRID_RECORD} here (not a `lit-retrieval grid` runs folder); pass --plan")
    plan_path = read_object(record, GRID_RECORD).get("plan")
    if not isinstance(plan_path, str) or not plan_path:
        raise UsageError(str(record), f"{GRID_RECORD} names no plan ('plan'); pass --plan")
    return plan_path


def run_locally(runs: list[Run], pending: list[Run], runs_dir: Path, queue: TaskQueue | None = None) -> int:
    """`grid --local`: the `pending` runs one after another in this process's machine, a run another
    process holds left alone (its .run.lock); 1 when any failed, else 0."""
    failures = 0
    counts = {"failed": 0, "left_alone": 0}
    with Progress("grid", len(runs), "runs", completed=len(runs) - len(pending), counts=counts, heartbeat=True) as bar:
        for run_ in pending:
            name = f"[{run_.index}] {run_.row.name} seed {run_.seed}"
            print(f"{name} ...", flush=True)
            try:
                code = execute(run_.folder(runs_dir), queue=queue)
            except OutputLocked as locked:
                print(f"{name}: left alone, {locked}", flush=True)
                bar.skip(left_alone=1)
                continue
            print(f"{name}: {'done' if code == 0 else f'failed ({code})'}", flush=True)
            failures += code != 0
            bar.advance(failed=int(code != 0))
    return 1 if failures else 0
