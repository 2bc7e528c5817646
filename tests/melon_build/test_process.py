"""`lit-retrieval build-melon` as a process against a real HTTP server (the fake endpoint, which
counts every request it receives): a URL nothing listens on stops the build at once with one line,
and a build killed mid-stage (SIGTERM, as Slurm sends at a time limit, and SIGKILL) then resumed
counts in its statistics exactly the requests the server received."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from lit_retrieval.melon_build.chat import logged_calls
from helpers.melon_build_endpoint import FakeChatEndpoint, melon_responder
from helpers.melon_build_fixture import make_fixture
from helpers.melon_build_runs import CHAT, build_command, reviewed_build, stage_of


def test_an_endpoint_nothing_listens_on_stops_the_build_at_once(tmp_path):
    with FakeChatEndpoint(melon_responder()) as server:
        url = server.url  # closed on exit: connections to it are refused
    # the default retries with a 30 s backoff would wait minutes before giving a video up
    config = make_fixture(tmp_path, {"url": url, "model": "fake", "backoff_s": 30})
    out = tmp_path / "out"
    command, env = build_command(config, out)
    started = time.monotonic()
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    took = time.monotonic() - started
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"lit-retrieval build-melon: {url}/chat/completions: cannot connect"), lines[0]
    assert took < 60  # the interpreter's start on a busy machine; a single retry would wait 15 s or more
    assert not (out / "annotations.json").exists() and not (out / "validate-melon.json").exists()
    assert not (out / "stats.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_build_killed_mid_stage_counts_every_call_the_server_received(tmp_path, signum):
    """Killed while two requests are held by the server (after q1's 4 captions), the process logged
    every request sent so far; the resumed build asks again what was in flight, and its statistics
    count the calls of both runs, stage by stage, as the server counted them."""
    with FakeChatEndpoint(melon_responder(), hold_s=0.5) as server:
        config = make_fixture(tmp_path, {"url": server.url, **CHAT, "concurrency": 2})
        out = tmp_path / "out"
        command, env = build_command(config, out)
        process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not (len(server.requests) > 4 and server.in_flight == 2):  # both slots held at the server
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the build never had two summaries in flight"
            time.sleep(0.01)
        process.send_signal(signum)
        process.communicate(timeout=60)
        assert process.returncode == -signum
        killed = [stage_of(r) for r in server.requests]
        assert sum(logged_calls(out / "cache" / "llm-calls").values()) == len(killed)  # nothing lost with it
        reviewed_build(config, out)
        received = [stage_of(r) for r in server.requests]
    stats = json.loads((out / "stats.json").read_text())
    # the 12 requests of an uninterrupted build and at least the 2 the kill left unanswered, asked again
    assert len(received) >= 12 + 2 and stats["llm"]["qa-to-caption"]["calls"] == 4
    assert {stage: row["calls"] for stage, row in stats["llm"].items()} == {s: received.count(s) for s in set(received)}
