"""`DeepSpeedStrategy`: Lightning's DeepSpeed strategy (same arguments) that also runs on CPU, and
`DDPStrategy`: Lightning's DDP strategy with typed `DistributedDataParallel` options.

With `trainer.accelerator: cpu` it starts the real DeepSpeed engine on DeepSpeed's CPU
accelerator (DeepSpeed's choice when no GPU is visible, or `DS_ACCELERATOR=cpu`) over gloo: to
debug a DeepSpeed config on a laptop, and what CI runs (tests/training/test_deepspeed.py). On CPU it
lifts Lightning's CUDA-only checks and nothing else:

- `setup_environment` refuses every accelerator but CUDA: a CPU accelerator is let through;
- `setup_distributed` asks that device indices equal the local ranks (CPU devices have none);
- `deepspeed.initialize` gets `device_rank=root_device.index`, None on CPU, which DeepSpeed
  compares with 0: on CPU it gets the local rank;
- and `deepspeed.initialize` runs under `torch.no_grad()`: ZeRO-1/2 flatten the parameters into
  buffers that then require grad, and gloo's all-gather into them (an in-place copy into `split`
  views, which NCCL does not go through autograd for) failed the first optimizer step ("Output 0
  of Split is a view and is being modified inplace").

On any device it fixes four things of Lightning's strategy:

- DeepSpeed's `train_micro_batch_size_per_gpu` (DeepSpeed uses it for its throughput log) was read
  from the training loader's `batch_sampler`, which a loader of ready-made batches (GVE's,
  `batch_size=None`) lacks: then it is `logging_batch_size_per_gpu` if given, else 1;
- ZeRO-3 evaluates a checkpoint directory (`test --ckpt_path DIR`, see `load_checkpoint`);
- optimizer offload accepts the module's torch optimizer (`_format_config`);
- `validate`/`test` keep the model's own module hooks (Lightning deletes every hook before its inference
  engine; `_initialize_deepspeed_inference`).

And on CPU, ZeRO-3 gathers parameters one at a time (`stage3_allgather_sequential`): DeepSpeed's
coalesced gather of several parameters (`GatheredParameters`, so Lightning's load of full weights)
launches one asynchronous all-gather per parameter and waits for the last only, which orders them on
one CUDA stream but not under gloo, whose collectives run on a pool of threads: an earlier parameter
could still be filled with its old values after rank 0 had loaded it, so one or two of a checkpoint's
tensors were left at their initialisation, differently from run to run
(tests/training/test_deepspeed_gather.py).

    trainer:
      strategy:
        class_path: lit_retrieval.strategies.DeepSpeedStrategy
        init_args: {stage: 3}
"""

from __future__ import annotations

import contextlib
import tempfile
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.strategies import DDPStrategy as LightningDDPStrategy
from lightning.pytorch.strategies import DeepSpeedStrategy as LightningDeepSpeedStrategy
from lightning.pytorch.trainer.states import TrainerFn
from lightning.fabric.utilities.seed import reset_seed

from lit_retrieval.errors import ConfigError


class DeepSpeedStrategy(LightningDeepSpeedStrategy):
    """Lightning's DeepSpeed strategy, also on CPU (see the module docstring); Lightning's arguments and:

    Args:
        param_persistence_threshold: ZeRO-3 keeps parameters of at most this many elements whole on
            every rank (DeepSpeed's `stage3_param_persistence_threshold`; None: DeepSpeed's 1e5). 0
            partitions every one, so a tiny model gathers its weights as a large one does.
    """

    def __init__(self, *args: Any, param_persistence_threshold: int | None = None, **kwargs: Any) -> None:
        check_deepspeed_installed()
        super().__init__(*args, **kwargs)
        self.param_persistence_threshold = param_persistence_threshold

    @property
    def on_cpu(self) -> bool:
        return isinstance(self.accelerator, CPUAccelerator)

    def setup_environment(self) -> None:
        if not self.on_cpu:
            return super().setup_environment()
        check_deepspeed_accelerator()
        LightningDDPStrategy.setup_environment(self)  # Lightning's DeepSpeed override only adds the CUDA check

    def setup_distributed(self) -> None:
        if not self.on_cpu:
            return super().setup_distributed()
        reset_seed()  # what Lightning's does, less `_validate_device_index_selection`
        self.set_world_ranks()
        self._init_deepspeed_distributed()

    def _setup_model_and_optimizer(self, model: Any, optimizer: Any, lr_scheduler: Any = None) -> Any:
        with self._cpu_initialize():
            return super()._setup_model_and_optimizer(model, optimizer, lr_scheduler)

    def _initialize_deepspeed_inference(self, model: Any) -> None:
        """Lightning's inference engine set-up, which first deletes every hook of every module (to drop a
        training engine's DeepSpeed hooks), with the model's own hooks put back first in their order:
        TS2-Net's and UCoFiA's token shift (a forward pre-hook in the ViT) and the legacy-key renaming of
        a checkpoint's load were silently gone in `validate`/`test` under DeepSpeed (issue 57)."""
        own = own_hooks(model)
        with self._cpu_initialize():
            super()._initialize_deepspeed_inference(model)
        for module, name, hooks in own:
            setattr(module, name, OrderedDict([*hooks.items(), *getattr(module, name).items()]))

    @contextlib.contextmanager
    def _cpu_initialize(self) -> Iterator[None]:
        """On CPU, `deepspeed.initialize` under `no_grad` with `root_device` = `cpu:<local rank>`
        (Lightning builds its `device_rank` from the index; DeepSpeed's CPU accelerator ignores it
        otherwise). See the module docstring."""
        if not self.on_cpu:
            yield
            return
        devices = self.parallel_devices
        self.parallel_devices = [torch.device("cpu", i) for i in range(len(devices))]
        try:
            with torch.no_grad():
                yield
        finally:
            self.parallel_devices = devices

    def load_checkpoint(self, checkpoint_path: Any, weights_only: bool | None = None) -> dict[str, Any]:
        """ZeRO-3 evaluation (`validate`/`test`/`predict`) of a checkpoint directory: consolidated on
        each rank as `convert-checkpoint` does; the weights load in `load_model_state_dict`, and the
        hooks see the checkpoint without them, as after DeepSpeed's own load. DeepSpeed's load
        cannot: ZeRO-3 keeps the weights in the optimizer's shards, and the evaluation engine has no
        optimizer ("'DeepSpeedZeRoOffload' object has no attribute '_restore_from_bit16_weights'").
        Lightning's ZeRO-3 load of full weights sets them on rank 0 and broadcasts the parameters only,
        so every rank also takes the checkpoint's buffers here (and on CPU it needs the sequential
        gathers of `_format_config`): it scores as the converted file does without DeepSpeed."""
        self._consolidated = None
        if not (self.zero_stage_3 and Path(checkpoint_path).is_dir() and not self._fitting()):
            return super().load_checkpoint(checkpoint_path, weights_only)
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        with tempfile.TemporaryDirectory() as folder:
            checkpoint = convert_zero_checkpoint_to_fp32_state_dict(checkpoint_path, Path(folder) / "full.ckpt")
        self._consolidated = checkpoint.pop("state_dict")
        return checkpoint

    def load_model_state_dict(self, checkpoint: Any, strict: bool = True) -> None:
        if getattr(self, "_consolidated", None) is None:
            return super().load_model_state_dict(checkpoint, strict)
        self.model_to_device()  # Lightning's path for `load_full_weights` under ZeRO-3
        self._restore_zero_state({"state_dict": self._consolidated}, strict=strict)
        # Lightning loads on rank 0 and broadcasts the parameters only: every rank takes the buffers
        for name, buffer in self.lightning_module.named_buffers():
            if name in self._consolidated:
                buffer.copy_(self._consolidated[name])
        self._consolidated = None

    def _format_config(self) -> None:
        """Optimizer offload with the module's own (torch) optimizer, which DeepSpeed refuses unless
        told (`zero_force_ds_cpu_optimizer`): our modules build AdamW in `configure_optimizers`.
        It then steps on the CPU in torch, slower than DeepSpeed's compiled CPU Adam. And
        `param_persistence_threshold`, and on CPU ZeRO-3's sequential gathers (module docstring)."""
        super()._format_config()
        zero = self.config.get("zero_optimization", {})
        if "offload_optimizer" in zero:
            self.config.setdefault("zero_force_ds_cpu_optimizer", False)
        if self.on_cpu and zero.get("stage") == 3:
            zero.setdefault("stage3_allgather_sequential", True)
        if self.param_persistence_threshold is not None:
            zero.setdefault("stage3_param_persistence_threshold", self.param_persistence_threshold)

    def _fitting(self) -> bool:
        return self.lightning_module.trainer.state.fn == TrainerFn.FITTING

    def _auto_select_batch_size(self) -> int:
        loader = self.lightning_module.trainer.fit_loop._data_source
        if loader.is_defined():
            sampler = getattr(loader.dataloader(), "batch_sampler", None)
            if sampler is not None:
                return sampler.batch_size
        return 1


# the hook tables Lightning's `remove_module_hooks` empties and a model of ours may fill; backward hooks are
# left out (their full/partial flag is reset with them, and inference runs no backward)
HOOK_TABLES = ("_forward_pre_hooks", "_forward_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks")


def from_deepspeed(hook: Any) -> bool:
    """Whether a hook table's entry is a function of DeepSpeed's (a wrapped hook is unwrapped first)."""
    function = getattr(hook, "hook", hook)
    function = getattr(function, "func", function)
    return (getattr(function, "__module__", None) or "").startswith("deepspeed")


def own_hooks(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, dict]]:
    """`(module, table, {handle id: hook})` of every hook on `model`'s modules that is not DeepSpeed's."""
    tables = ((module, name, getattr(module, name)) for module in model.modules() for name in HOOK_TABLES)
    own = [(module, name, {k: h for k, h in table.items() if not from_deepspeed(h)}) for module, name, table in tables]
    return [entry for entry in own if entry[2]]


def check_deepspeed_installed() -> None:
    """Refuse, in one line naming the extra, a DeepSpeed strategy without the `deepspeed` package
    (Lightning's own check raises while jsonargparse builds the strategy: a chained traceback)."""
    try:
        import deepspeed  # noqa: F401
    except ImportError as err:
        raise ConfigError(
            f"trainer.strategy: DeepSpeedStrategy needs the deepspeed package ({err}); install the project's "
            "deepspeed extra: pip install 'lit-retrieval[deepspeed]' (or make install EXTRAS=dev,deepspeed)"
        ) from None


class DDPStrategy(LightningDDPStrategy):
    """Lightning's DDP strategy with the `DistributedDataParallel` options our configs set typed
    (Lightning passes them on through `**kwargs`, which the config parser cannot check: a
    `find_unused_parameters: maybe` reached torch as a TypeError). Other DDP options still pass
    through `**kwargs` as in Lightning's."""

    def __init__(
        self,
        *args: Any,
        find_unused_parameters: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
        broadcast_buffers: bool = True,
        bucket_cap_mb: float | None = None,
        **kwargs: Any,
    ) -> None:
        ddp = dict(find_unused_parameters=find_unused_parameters, gradient_as_bucket_view=gradient_as_bucket_view)
        ddp.update(static_graph=static_graph, broadcast_buffers=broadcast_buffers)
        if bucket_cap_mb is not None:
            ddp["bucket_cap_mb"] = bucket_cap_mb
        super().__init__(*args, **ddp, **kwargs)


def check_deepspeed_accelerator() -> None:
    """A CPU run needs DeepSpeed's CPU accelerator: refuse another in one line."""
    from deepspeed.accelerator import get_accelerator

    name = get_accelerator().device_name()
    if name != "cpu":
        raise ConfigError(
            f"trainer.accelerator is cpu but DeepSpeed chose its {name!r} accelerator: set DS_ACCELERATOR=cpu"
        )
