"""Where an interrupted epoch stood, kept in checkpoints by the data modules.

Lightning restores its loop counters only after it has built the training loader, and it does not
fast-forward a map-style loader; so a data module saves (epoch, batches done) itself and, when a
run resumes inside an epoch, its sampler starts at the next batch of the same order. The position may
be read after the loader was built: Lightning's DeepSpeed strategy restores a checkpoint after its own
setup, whose `configure_optimizers` builds the training loader to count the schedule's steps
(`trainer.estimated_stepping_batches`); the loader's sampler is then placed again (`place_training`)."""

from __future__ import annotations

from collections.abc import Callable

import lightning as L


class EpochPosition:
    """Mixin for a `LightningDataModule` whose training sampler can start mid-epoch."""

    resume_position: tuple[int, int] | None = None
    _replace_training: Callable[[], None] | None = None  # places the built training sampler again

    def state_dict(self) -> dict[str, int]:
        """The epoch the batch count belongs to (the last one started: a checkpoint written after an
        epoch's end has `current_epoch` already counting it, with its batches) and its batches."""
        trainer = getattr(self, "trainer", None)
        if trainer is None:
            return {}
        epoch = max(trainer.fit_loop.epoch_progress.current.started - 1, 0)
        return {"epoch": epoch, "batches": trainer.fit_loop.epoch_loop.batch_progress.current.ready}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        if state_dict:
            self.resume_position = (int(state_dict["epoch"]), int(state_dict["batches"]))
            if self._replace_training is not None:  # the training loader was built before the checkpoint was read
                self._replace_training()

    def place_training(
        self, trainer: L.Trainer | None, batches_per_epoch: int, place: Callable[[int, int], None]
    ) -> None:
        """Calls `place(epoch, batches to skip)` for the training sampler about to be built, and again
        if a checkpoint's position arrives after it was built (module docstring)."""

        def replace() -> None:
            place(*self.start_of_training(trainer, batches_per_epoch))

        self._replace_training = replace
        replace()

    def start_of_training(self, trainer: L.Trainer | None, batches_per_epoch: int) -> tuple[int, int]:
        """(epoch, batches to skip) for the loader about to be built; uses up a resume position."""
        position = self.upcoming_position(trainer, batches_per_epoch)
        self.resume_position = None
        return position

    def upcoming_position(self, trainer: L.Trainer | None, batches_per_epoch: int) -> tuple[int, int]:
        """(epoch, batches to skip) the next training loader will start at, the resume position kept
        (callbacks that prepare an epoch before Lightning has restored its counters ask this)."""
        if self.resume_position is not None:
            epoch, done = self.resume_position
            return (epoch + 1, 0) if done >= batches_per_epoch else (epoch, done)
        return (trainer.current_epoch if trainer is not None else 0), 0
