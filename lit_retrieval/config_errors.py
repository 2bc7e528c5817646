"""Config errors that name the valid choices: misspelled keys and unknown classes.

jsonargparse reports "Option 'batchsize' is not accepted" and "module ... has no attribute ...";
this adds the accepted options (closest first) or the classes the module offers. It drops, without a
word, an unknown key whose value is an empty mapping (`rescore: {is: {}}`: the mapping flattens to no
option at all); `unknown_empty_mappings` finds such keys in the config files a command was given.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
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


def _empty_mappings(raw: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The key paths of a loaded YAML document whose value is `{}`."""
    if isinstance(raw, dict):
        for key, value in raw.items():
            if value == {}:
                yield (*path, str(key))
            else:
                yield from _empty_mappings(value, (*path, str(key)))


def _parent_keys(parsed: Namespace, path: tuple[str, ...]) -> list[str] | None:
    """The keys the parsed config holds where `path` ends (a class's `init_args` looked into), or None
    when `path`'s last key is among them or a key before it is not (a list, a free-form value)."""
    node: Any = parsed
    for position, key in enumerate(path):
        if isinstance(node, Namespace) and key not in vars(node) and isinstance(vars(node).get("init_args"), Namespace):
            node = node.init_args
        if not isinstance(node, (Namespace, dict)):
            return None
        keys = list(vars(node) if isinstance(node, Namespace) else node)
        if key not in keys:
            return keys if position == len(path) - 1 else None
        node = node[key]
    return None


def unknown_empty_mappings(files: list[str], parsed: Namespace) -> list[str]:
    """One line per key of `files` (YAML configs, in order) that holds `{}` and that `parsed` (what
    jsonargparse made of them) does not have: a key it dropped instead of refusing."""
    problems = []
    for name in files:
        try:
            raw = yaml.safe_load(Path(name).read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # the parser itself has refused or read it
        for path in _empty_mappings(raw):
            valid = _parent_keys(parsed, path)
            if valid is not None:
                choices = ", ".join(_closest_first(path[-1], sorted(valid)))
                problems.append(f"'{'.'.join(path)}' (in {name}) is not an option; valid there: {choices}")
    return problems
