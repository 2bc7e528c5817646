"""`lit-retrieval build-melon` as the build-melon tests run it: in this process (with the human review of
the judge's flags), or as its own process whose V2T embedder (`helpers.melon_build_fixture.ColourEmbedder`)
imports from tests/; and the stage a request the fake endpoint received was for."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from helpers.melon_build_endpoint import image_urls
from lit_retrieval.commands import run_command
from lit_retrieval.melon_build.llm_stages import ReviewError

TESTS = Path(__file__).resolve().parents[1]

CHAT = {"model": "fake", "backoff_s": 0.001, "max_retries": 1}


def build(config: Path, out: Path, *extra: str) -> int:
    return run_command("build-melon", ["--config", str(config), "--out", str(out), *extra])


def decide(out: Path, decision: str) -> None:
    """A reviewer's pass over OUT/review.jsonl: every flagged event gets `decision`."""
    path = out / "review.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**row, "decision": decision}) + "\n" for row in rows))


def reviewed_build(config: Path, out: Path, decision: str = "reject") -> int:
    """A build whose write stops at the pending review, the review, and the write again."""
    with pytest.raises(ReviewError, match="still pending"):
        build(config, out)
    decide(out, decision)
    return build(config, out, "--stage", "write")


def build_command(config: Path, out: Path) -> tuple[list[str], dict[str, str]]:
    """The command line of a build and its environment (the fixture's embedder imports from tests/)."""
    command = [sys.executable, "-m", "lit_retrieval", "build-melon", "--config", str(config), "--out", str(out)]
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    return command, {**os.environ, "PYTHONPATH": path}


def stage_of(request: dict) -> str:
    """The stage a request the server received was for (the default prompts' wording)."""
    if image_urls(request):
        return "judge"
    return "qa-to-caption" if "Question:" in json.dumps(request["messages"]) else "summarise"
