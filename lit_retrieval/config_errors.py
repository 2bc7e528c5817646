"""Config errors that name the valid choices: misspelled keys and unknown classes.

jsonargparse reports "Option 'batchsize' is not accepted" and "module ... has no attribute ...";
this adds the accepted options (closest first) or the classes the module offers.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re

from jsonargparse._parameter_resolvers import get_signature_parameters
from lightning.pytorch.cli import LightningArgumentParser

from lit_retrieval.errors import ConfigError

_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([\w.]+)':\s*\n\s*Option '(\w+)' is not accepted")
_NO_ATTRIBUTE = re.compile(r"module '([\w.]+)' has no attribute '(\w+)'")


def _init_parameters(class_path: str) -> list[str]:
    """The arguments jsonargparse accepts for a class, `**kwargs` passed to a parent included
    (its resolver is not exported publicly; it is the parser's own view of the signature)."""
    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    return [p.name for p in get_signature_parameters(cls, None)]


def _closest_first(wrong: str, choices: list[str]) -> list[str]:
    close = difflib.get_close_matches(wrong, choices, n=3, cutoff=0.5)
    return close + [c for c in choices if c not in close]


def explain(message: str) -> str:
    """Append 'did you mean / valid choices' lines to a jsonargparse error message."""
    hints = []
    for class_path, option in _CLASS_PROBLEM.findall(message):
        try:
            choices = _closest_first(option, _init_parameters(class_path))
        except (ImportError, AttributeError, ValueError, TypeError):
            continue
        hints.append(f"'{option}' is not an argument of {class_path}; valid: {', '.join(choices)}")
    for module_name, attr in _NO_ATTRIBUTE.findall(message):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and not n.startswith("_"))
        hints.append(f"{module_name} has no class '{attr}'; available: {', '.join(_closest_first(attr, classes))}")
    return message if not hints else message + "\n\nHint:\n  " + "\n  ".join(hints)


class ExplainingArgumentParser(LightningArgumentParser):
    """LightningArgumentParser whose errors list the valid keys or classes."""

    def error(self, message: str, ex: Exception | None = None):
        """Raise a `ConfigError` (printed by `lit-retrieval` as one line, exit status 2) where
        jsonargparse would print its usage and exit; its internal, caught errors are unchanged."""
        if self.exit_on_error:
            raise ConfigError(explain(message)) from ex
        return super().error(explain(message), ex)
