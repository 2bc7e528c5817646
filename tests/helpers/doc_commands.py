"""Commands as the docs print them: read from a doc's fenced code blocks, so a test runs what a reader copies
(never a retyped copy that could drift from the page)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^[ ]*```([a-z]*)\n(.*?)^[ ]*```", re.S | re.M)  # every block, also indented (a list item)
SHELL = ("", "bash", "sh")


def fenced_block(doc: str, language: str, after: str) -> str:
    """The text of the first ```language block of `doc` after the first occurrence of `after`, indentation removed."""
    text = (ROOT / doc).read_text()
    match = re.search(rf"^([ ]*)```{language}\n(.*?)^[ ]*```", text[text.index(after) :], re.S | re.M)
    assert match, f"{doc}: no ```{language} block after {after!r}"
    return "".join(line.removeprefix(match.group(1)) + "\n" for line in match.group(2).splitlines())


def documented_commands(doc: str) -> list[str]:
    """Every command of the shell blocks (```bash, ```sh, unlabelled) of `doc` (relative to the repository root),
    one string each: backslash-continued lines joined, comments and blank lines dropped."""
    text = (ROOT / doc).read_text()
    commands = []
    for language, block in FENCE.findall(text):
        if language not in SHELL:
            continue
        for command in re.sub(r"\\\n\s*", " ", block).splitlines():
            try:
                words = shlex.split(command, comments=True)
            except ValueError:  # not shell (a YAML or prose line in an unlabelled block): no command to run
                continue
            if words:
                commands.append(shlex.join(words))
    return commands


def documented_command(doc: str, *markers: str) -> list[str]:
    """The one command of `doc`'s code blocks that contains every one of `markers`, split into words as the
    shell splits it (variables such as `$USER` are left as typed: the caller replaces the ones it needs)."""
    found = [c for c in documented_commands(doc) if all(m in c for m in markers)]
    assert len(found) == 1, f"{doc}: {len(found)} commands contain {markers} (expected one): {found}"
    return shlex.split(found[0])


def replaced(words: list[str], **values: str) -> list[str]:
    """`words` with each `$NAME` (or `${NAME}`) of `values` replaced by its value, as the reader's shell would."""
    out = []
    for word in words:
        for name, value in values.items():
            word = word.replace("${" + name + "}", value).replace("$" + name, value)
        out.append(word)
    return out
