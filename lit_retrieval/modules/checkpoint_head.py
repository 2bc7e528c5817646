"""A dual-encoder checkpoint against the configured similarity head, before its weights load.

`test --ckpt_path` (or `fit --ckpt_path`) with a checkpoint of another head would end in torch's
strict-loading error ("Unexpected key(s) in state_dict: head.temporal.weight_ih_l0 ..."). The head's
weights are compared first (names and shapes), and a mismatch is one `UsageError` naming the file
and both heads: the checkpoint's class, which `record_head` stores at save time (the module's
hyper-parameters leave the head out), and the config's `model.head`. Only the weights are compared:
a checkpoint tested under another parameter-free head (the same weights) loads as before.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from lit_retrieval.errors import UsageError

HEAD_CLASS_KEY = "head_class"


def class_path(module: nn.Module) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def record_head(checkpoint: dict[str, Any], head: nn.Module) -> None:
    """Store the head's class in `checkpoint` (what `check_head` names when a config's differs)."""
    checkpoint[HEAD_CLASS_KEY] = class_path(head)


def _head_shapes(state_dict: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in state_dict.items() if k.startswith("head.")}


def check_head(checkpoint: dict[str, Any], head: nn.Module, path: str, other_class_only: bool = False) -> None:
    """Raise `UsageError` naming `path` and both heads when the checkpoint's head weights (names and
    shapes) are not those of `head`, the module's configured head. A checkpoint without a
    `state_dict` (DeepSpeed's, whose engine loads the weights itself) is not compared. With
    `other_class_only`, a head of the configured class but other settings passes: the CLI names
    the options that changed it instead (`retrieval_cli.refuse_reshaping_options`)."""
    if "state_dict" not in checkpoint:
        return
    stored = _head_shapes(checkpoint["state_dict"])
    expected = {f"head.{k}": tuple(v.shape) for k, v in head.state_dict().items()}
    if stored == expected:
        return
    recorded = checkpoint.get(HEAD_CLASS_KEY)
    configured = type(head).__name__
    if other_class_only and recorded == class_path(head):
        return
    if recorded is None:
        theirs = "another (its class is not recorded in this older checkpoint)"
    elif recorded == class_path(head):
        theirs = f"a {configured} of other settings"
    else:
        theirs = recorded.rsplit(".", 1)[-1]
    only_stored = sorted(k for k in stored if expected.get(k) != stored[k])
    only_expected = sorted(k for k in expected if stored.get(k) != expected[k])
    raise UsageError(
        path,
        f"the checkpoint's head is {theirs}, the config's model.head is {configured} (weights only in the "
        f"checkpoint: {', '.join(only_stored[:3]) or 'none'}; only in {configured}: "
        f"{', '.join(only_expected[:3]) or 'none'}); give the head it was trained with (model.init_args.head)",
    )
