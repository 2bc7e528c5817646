"""`MultiTaskDataModule`: GVE's multi-task training mixture (GVE Sec. 3.3, A.4, Tab. 6-7).

Training batches come from `TaskBatchSampler` (one task per batch, curriculum probabilities,
rank-sharded, resumable); each batch is processed in the DataLoader workers into the model inputs
of its queries and of its targets (positives first, then every pair's hard negatives in order).
Validation embeds every task's queries and its distinct targets once and ranks targets per query.

Without the Modality Pyramid callback, tasks are drawn with `sampling` (`task_sampler.size_weights`):
`equal_passes` (default, P ~ n_k / B_k: the curriculum's base diet, so GVE-s and GVE-i differ from GVE by
the curriculum only, GVE Sec. 4.2), `proportional` (P ~ n_k per step, naive mixing) or `uniform`.
`include_synthetic: false` drops tasks marked `synthetic` (the GVE-i ablation).

Hard negatives (`negative_mining`). `prober`, GVE Sec. 3.3: "we augment in-batch negatives with hard
negatives mined from a large external corpus using the same prober Psi_t": the task files' negatives are
not read; the `HardNegativeMining` callback mines them at every epoch start with that epoch's prober
(`set_task_negatives`) among the task's own targets and its `negative_corpus` files; DataLoader workers
are then started afresh each epoch so that they read the new negatives. The paper-row configs
(configs/gve/data_*.yaml) use it. `offline` (the class default): each pair's negatives come from its
task file, mined once before training by `lit-retrieval mine-negatives` with a prober of your choice and
never again; cheaper, not the paper's per-epoch Psi_t (A.4's "pre-mined explicit hard negatives" defers to
Sec. 3.3: "As the aforementioned methodology").

`prober_path` is Psi_1, the first epoch's prober of the Modality Pyramid and of the mining (Sec. 3.3:
"For t=1, Psi_1 is a strong off-the-shelf embedder (e.g., GME-7B); for t>1, Psi_t is the GVE
checkpoint from the end of epoch t-1"): a model directory, or `model` for the model itself (our
fallback, not the paper's). It lives here, not on the callbacks, so that one key serves both and a
plan sets it for every row (`grid --override data.init_args.prober_path=DIR`); a callback that needs
Psi_1 refuses to start while it is unset.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

from lit_retrieval.data.bad_records import BadRecordPolicy
from lit_retrieval.data.items import ItemError, ItemProcessing, MediaItem
from lit_retrieval.data.batching.resume import EpochPosition
from lit_retrieval.data.batching.samplers import SAMPLINGS, Sampling, TaskBatchSampler, default_steps, size_weights
from lit_retrieval.data.gve.tasks import TaskRecord, TaskSpec, read_task
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.data.media.video import VideoDecodeError
from lit_retrieval.data.batching.workers import WorkersAtFirstBatch, pins_memory, worker_init_fn
from lit_retrieval.errors import ConfigError, check_at_least

log = logging.getLogger(__name__)
PROBER_IS_MODEL = "model"  # data.prober_path: the model being trained probes the first epoch too
BadVideoPolicy = Literal["raise", "replace"]


def content_key(item: MediaItem) -> int:
    """A stable 63-bit id of an item's content (identical on every rank and run)."""
    return int.from_bytes(hashlib.blake2b(item.key.encode(), digest_size=8).digest(), "little") >> 1


@dataclass
class TaskData:
    spec: TaskSpec
    records: list[TaskRecord]


class TrainBatches(Dataset):
    """`dataset[[(task, record), ...]]` -> the processed batch of those pairs."""

    def __init__(
        self, tasks: list[TaskData], processing: ItemProcessing, on_bad_video: BadVideoPolicy = "raise"
    ) -> None:
        self.tasks = tasks
        self.processing = processing
        self.on_bad_video = on_bad_video
        self.replaced = 0

    def _process(self, spec: TaskSpec, records: list[TaskRecord]) -> dict[str, Any]:
        targets = [r.positive for r in records] + [n for r in records for n in r.negatives]
        batch = {
            "query": dict(self.processing([r.query for r in records], spec.instruction)),
            "target": dict(self.processing(targets, spec.target_instruction)),
        }
        media_rows = getattr(self.processing, "media_rows", None)  # read here, on the host (issue 57.10)
        if media_rows is not None:
            batch["media_rows"] = {side: media_rows(batch[side]) for side in ("query", "target")}
        return batch

    def _usable(self, task: int, index: int) -> TaskRecord:
        """The record at `index`, or the next one whose media decode (each replacement counted
        and logged). Only called once a batch has failed, so good batches are decoded once."""
        data = self.tasks[task]
        for attempt in range(len(data.records)):
            record = data.records[(index + attempt) % len(data.records)]
            try:
                self._process(data.spec, [record])
                return record
            except (VideoDecodeError, ItemError) as err:
                self.replaced += 1
                log.warning(
                    "task %s: record %s replaced (%s); %d replaced so far",
                    data.spec.name,
                    record.record_id,
                    err,
                    self.replaced,
                )
        raise VideoDecodeError(data.spec.path, f"no record of task {data.spec.name!r} has decodable media")

    def __getitem__(self, batch: list[tuple[int, int]]) -> dict[str, Any]:
        task = batch[0][0]
        if any(t != task for t, _ in batch):
            raise ValueError("a training batch must come from one task")
        spec = self.tasks[task].spec
        records = [self.tasks[task].records[i] for _, i in batch]
        if any(len(r.negatives) < spec.num_negatives for r in records):
            raise ConfigError(
                f"task {spec.name!r}: pairs without their {spec.num_negatives} hard negatives: "
                "data.negative_mining: prober needs the HardNegativeMining callback, which mines them each epoch"
            )
        try:
            out = self._process(spec, records)  # decode errors name the file
        except (VideoDecodeError, ItemError):
            if self.on_bad_video == "raise":
                raise
            records = [self._usable(task, i) for _, i in batch]
            out = self._process(spec, records)
        out.update(
            task=spec.name,
            task_index=task,
            num_negatives=spec.num_negatives,
            target_keys=torch.tensor([content_key(r.positive) for r in records]),
            ids=[r.record_id for r in records],
        )
        return out

    def __len__(self) -> int:  # batches are addressed by the sampler, not by position
        return sum(len(t.records) for t in self.tasks)


@dataclass(frozen=True)
class EvalEntry:
    task: int
    side: str  # "query" or "target"
    position: int  # query index, or target index among the task's distinct targets


class EvalBatches(Dataset):
    """Pre-formed batches of one task and one side (queries or distinct targets) for evaluation."""

    def __init__(self, tasks: list[TaskData], processing: ItemProcessing, batch_size: int) -> None:
        self.tasks = tasks
        self.processing = processing
        self.targets: list[list[MediaItem]] = []
        self.query_targets: list[list[int]] = []
        self.batches: list[list[EvalEntry]] = []
        for t, data in enumerate(tasks):
            index: dict[str, int] = {}
            for record in data.records:
                index.setdefault(record.positive.key, len(index))
            self.targets.append([None] * len(index))
            for record in data.records:
                self.targets[t][index[record.positive.key]] = record.positive
            self.query_targets.append([index[r.positive.key] for r in data.records])
            for side, count in (("query", len(data.records)), ("target", len(index))):
                for start in range(0, count, batch_size):
                    self.batches.append([EvalEntry(t, side, i) for i in range(start, min(count, start + batch_size))])

    def __getitem__(self, i: int) -> dict[str, Any]:
        entries = self.batches[i]
        task, side = entries[0].task, entries[0].side
        spec = self.tasks[task].spec
        if side == "query":
            items, instruction = [self.tasks[task].records[e.position].query for e in entries], spec.instruction
        else:
            items, instruction = [self.targets[task][e.position] for e in entries], spec.target_instruction
        return {
            "inputs": dict(self.processing(items, instruction)),
            "task_index": torch.full((len(entries),), task),
            "is_query": torch.full((len(entries),), side == "query"),
            "position": torch.tensor([e.position for e in entries]),
        }

    def __len__(self) -> int:
        return len(self.batches)


class MultiTaskDataModule(EpochPosition, L.LightningDataModule):
    """Training tasks mixed one task per batch; validation tasks ranked per task.

    Args:
        tasks: training tasks (GVE Tab. 6-7 rows).
        val_tasks: evaluation tasks (their `batch_size` and `num_negatives` are ignored).
        steps_per_epoch: training batches per epoch (default: every task's pairs once, in global batches).
        sampling: task probabilities without a curriculum: `equal_passes` (n_k / B_k), `proportional` (n_k)
            or `uniform` (module notes).
        include_synthetic: keep tasks marked `synthetic` (false = GVE-i).
        eval_batch_size: items per evaluation batch.
        num_workers: DataLoader workers (GVE Tab. 9: 1).
        on_bad_record: `raise` or `skip` malformed task lines.
        on_bad_video: `raise` on an undecodable video or image, or `replace` the pair with the
            task's next usable one (counted and logged).
        seed: base of the task schedule and pair order.
        frame_cache: read video frames from this frame cache (`lit-retrieval cache-frames`) instead
            of decoding; a clip missing from it is decoded (with a warning), a cache of other
            sampling settings or changed videos is refused (`lit_retrieval.data.media.frame_cache`).
        negative_mining: `prober` (mined each epoch with Psi_t by `HardNegativeMining`, GVE Sec. 3.3) or
            `offline` (the task files' negatives, mined once before training); module notes.
        prober_path: Psi_1, the first epoch's prober: a model directory (the paper: GME-7B) or `model` (the
            model itself, our fallback); None: unset, refused by the callbacks that probe.
        hard_negatives: false trains every task on in-batch negatives alone (each task's `num_negatives`
            taken as 0): the ablation of GVE Sec. 3.3's hard negatives, which are added to the in-batch ones.
        batch_scale: every task's `batch_size` multiplied by this. GVE A.8's batch sizes are per GPU on 32 GPUs,
            contrasted together; on N GPUs `batch_scale: 32 / N` (4 on 8, 2 on 16) keeps each task's contrastive
            batch, its probability under `equal_passes` and the optimizer steps of an epoch (docs/scale-out.md;
            hold the larger per-GPU batch with `model.init_args.grad_cache`). Our option: the paper trains on 32.
    """

    def __init__(
        self,
        tasks: list[TaskSpec],
        val_tasks: list[TaskSpec] | None = None,
        steps_per_epoch: int | None = None,
        sampling: Sampling = "equal_passes",
        include_synthetic: bool = True,
        eval_batch_size: int = 16,
        num_workers: int = 1,
        on_bad_record: BadRecordPolicy = "raise",
        on_bad_video: BadVideoPolicy = "raise",
        seed: int = 0,
        frame_cache: str | None = None,
        negative_mining: Literal["offline", "prober"] = "offline",
        prober_path: str | None = None,
        hard_negatives: bool = True,
        batch_scale: int = 1,
    ) -> None:
        super().__init__()
        # impossible values are refused when the config is parsed (LightningCLI builds the module then)
        check_at_least("data", 1, eval_batch_size=eval_batch_size)
        check_at_least("data", 1, **({"steps_per_epoch": steps_per_epoch} if steps_per_epoch is not None else {}))
        check_at_least("data", 0, num_workers=num_workers)
        check_at_least("data", 1, batch_scale=batch_scale)
        if sampling not in SAMPLINGS:
            raise ConfigError(f"data.sampling must be one of {list(SAMPLINGS)}, got {sampling!r}")
        if negative_mining not in ("offline", "prober"):
            raise ConfigError(f"data.negative_mining must be 'offline' or 'prober', got {negative_mining!r}")
        if prober_path not in (None, PROBER_IS_MODEL) and not Path(prober_path).is_dir():
            raise ConfigError(
                f"data.prober_path: {prober_path} is not a model directory (or 'model': the model itself)"
            )
        self.specs = [
            replace(t, num_negatives=t.num_negatives if hard_negatives else 0, batch_size=t.batch_size * batch_scale)
            for t in tasks
            if include_synthetic or not t.synthetic
        ]
        if not self.specs:
            raise ConfigError("data.tasks: no training task left (all are synthetic and include_synthetic is false)")
        names = [t.name for t in self.specs]
        if len(set(names)) != len(names):
            raise ConfigError(f"data.tasks: task names must be unique, got {names}")
        self.val_specs = list(val_tasks or [])
        self.steps_per_epoch = steps_per_epoch
        self.sampling = sampling
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers
        self.on_bad_record = on_bad_record
        self.on_bad_video = on_bad_video
        self.seed = seed
        self.frame_cache = frame_cache
        self.negative_mining = negative_mining
        self.prober_path = prober_path
        self.mined_epoch: int | None = None  # the epoch whose prober mined the current negatives
        self.processing: ItemProcessing | None = None
        self.train_data: list[TaskData] = []
        self.val_data: list[TaskData] = []
        self.sampler: TaskBatchSampler | None = None
        self.eval_set: EvalBatches | None = None
        self.pending_probabilities: dict[str, float] | None = None

    @property
    def task_names(self) -> list[str]:
        return [s.name for s in self.specs]

    def setup(self, stage: str | None = None) -> None:
        if self.processing is None:
            module = self.trainer.lightning_module if self.trainer is not None else None
            if module is None or not hasattr(module, "processing"):
                raise RuntimeError(
                    "MultiTaskDataModule takes its input processing from the model (a GVE module); "
                    "set `.processing` to use it alone"
                )
            self.processing = module.processing
        if self.frame_cache and getattr(self.processing, "frame_cache", None) is None:
            if not hasattr(self.processing, "with_frame_cache"):
                raise ConfigError(
                    f"data.frame_cache: the model's input processing ({type(self.processing).__name__}) "
                    "reads no frame cache"
                )
            self.processing = self.processing.with_frame_cache(self.frame_cache)
        if stage in (None, "fit") and self.negative_mining == "prober" and self.trainer is not None:
            if not any(getattr(c, "mines_negatives", False) for c in self.trainer.callbacks):
                raise ConfigError(
                    "data.negative_mining: prober needs the HardNegativeMining callback in trainer.callbacks"
                )
        if not self.train_data and stage in (None, "fit"):
            from_file = self.negative_mining == "offline"
            self.train_data = [TaskData(s, read_task(s, self.on_bad_record, self.seed, from_file)) for s in self.specs]
        if not self.val_data and self.val_specs:
            self.val_data = [TaskData(s, read_task(s, self.on_bad_record, self.seed)) for s in self.val_specs]

    def set_task_probabilities(self, probabilities: dict[str, float]) -> None:
        """Curriculum hook: P(k) by task name, used from the next batch the sampler draws."""
        missing = set(self.task_names) - set(probabilities)
        if missing:
            raise ValueError(f"no probability for task(s) {sorted(missing)}")
        self.pending_probabilities = dict(probabilities)
        if self.sampler is not None:
            self.sampler.set_probabilities([probabilities[n] for n in self.task_names])

    def epoch_steps(self, world_size: int = 1) -> int:
        """Training batches per epoch (`steps_per_epoch`, else every task's pairs once)."""
        sizes = [len(d.records) for d in self.train_data]
        return self.steps_per_epoch or default_steps(sizes, [d.spec.batch_size for d in self.train_data], world_size)

    def upcoming_epoch(self, trainer: L.Trainer) -> int:
        """The epoch the training loader draws first: its sampler's (the loader may already be built,
        e.g. to count the scheduler's steps, using up the resume position), else the position's."""
        if self.sampler is not None:
            return self.sampler.epoch
        return self.upcoming_position(trainer, self.epoch_steps(trainer.world_size))[0]

    def set_task_negatives(self, name: str, negatives: list[tuple[MediaItem, ...]], epoch: int) -> None:
        """Replace the hard negatives of every pair of training task `name` (in record order), mined
        by the prober of `epoch` (`negative_mining: prober`)."""
        data = next(d for d in self.train_data if d.spec.name == name)
        if len(negatives) != len(data.records):
            raise ValueError(f"task {name!r}: {len(negatives)} negative lists for {len(data.records)} pairs")
        data.records[:] = [replace(r, negatives=tuple(n)) for r, n in zip(data.records, negatives)]
        self.mined_epoch = epoch

    def _initial_probabilities(self) -> list[float]:
        if self.pending_probabilities is not None:
            return [self.pending_probabilities[n] for n in self.task_names]
        return size_weights(
            [len(d.records) for d in self.train_data], [d.spec.batch_size for d in self.train_data], self.sampling
        )

    def _check_full_batches(self, world: int) -> None:
        """Refuse, before training, a training task with fewer records than one global batch, naming its
        file, its records and its batch size (`TaskBatchSampler` walks whole global batches only)."""
        for data in self.train_data:
            spec, records = data.spec, len(data.records)
            if records < spec.batch_size * world:
                share = f" x {world} processes" if world > 1 else ""
                reason = (
                    f"training task {spec.name!r} has {records} records, fewer than one batch of "
                    f"batch_size {spec.batch_size}{share}: lower its batch_size or add records"
                )
                raise AnnotationError(spec.path, "-", reason)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        self._check_full_batches(world)
        self.sampler = TaskBatchSampler(
            [len(d.records) for d in self.train_data],
            [d.spec.batch_size for d in self.train_data],
            self.steps_per_epoch,
            self._initial_probabilities(),
            self.seed,
            rank,
            world,
        )
        self.place_training(trainer, len(self.sampler), self.sampler.place)
        dataset = TrainBatches(self.train_data, self.processing, self.on_bad_video)
        # the first batch, not Lightning's early iter(), starts the workers and the schedule: the epoch's
        # curriculum P and mined negatives are set at its start (`WorkersAtFirstBatch`)
        return WorkersAtFirstBatch(dataset, sampler=self.sampler, batch_size=None, **self._worker_settings())

    def val_dataloader(self) -> DataLoader | list:
        if not self.val_data:
            return []
        self.eval_set = EvalBatches(self.val_data, self.processing, self.eval_batch_size)
        return DataLoader(self.eval_set, batch_size=None, **self._worker_settings())

    def _worker_settings(self) -> dict[str, Any]:
        """Workers are spawned, not forked, and kept across epochs: forking a process that has run
        the model (curriculum probing, training steps) crashed workers in torch's thread pools
        here. The sampler runs in the main process, so kept workers still see new probabilities.
        Each loader draws its worker seeds from its own generator, never from the global random
        state, so a resumed run's dropout continues exactly wherever its iterators are created.
        Workers ignore the stop signals (`data/batching/workers.py`)."""
        own = {
            "generator": torch.Generator().manual_seed(self.seed),
            "worker_init_fn": worker_init_fn(),
            "pin_memory": pins_memory(self.trainer),
        }
        if self.num_workers == 0:
            return {"num_workers": 0, **own}
        keep = self.negative_mining == "offline"  # mined negatives reach fresh workers only
        return {"num_workers": self.num_workers, "multiprocessing_context": "spawn", "persistent_workers": keep, **own}
