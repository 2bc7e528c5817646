"""build-melon's documented promises (docs/melon.md, "The chat endpoint"; "Caching, resuming, shards")
checked from the outside: the real `lit-retrieval build-melon` CLI as a subprocess against an
OpenAI chat-completions server written from the wire format alone (tests/helpers/openai_wire_server.py, its own
process on 127.0.0.1, sharing no code with the project's fake endpoint), which logs every request it
receives and every valid answer it sends.

Input: three videos of 3 segments each (one a timestamped QA source captioned by the LLM), all in the
test split (`test_fraction: 1`), so a clean build asks 3 captions, 3 summaries and 3 judge calls; with
3 segments the server's summary is one event per segment, so the annotation is known by hand.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from helpers.melon_build_fixture import write_colour_video

# five build-melon processes, ~10 s each to start (45 s on a quiet 2-core machine, 80 s on a busy one)
pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parents[1]
SERVER = TESTS / "helpers" / "openai_wire_server.py"

# (start, end, text, colour shown); the QA video's text is the answer, which the server returns as caption
QA = [
    (0, 40, "What is the man holding?", "A man holds a red umbrella while crossing the road.", "red"),
    (50, 90, "Which animal drinks from the river?", "A green frog drinks from the shallow river.", "green"),
    (100, 140, "What does the girl throw?", "A girl throws a blue frisbee into the air.", "blue"),
]
C1 = [
    (0, 45, "Red roses are planted along a garden path.", "red"),
    (45, 90, "A green tram rattles through the old town.", "green"),
    (90, 140, "Blue fireworks light the sky over a harbour.", "blue"),
]
C2 = [
    (0, 40, "A white cat sleeps on a sunny windowsill.", "white"),
    (45, 85, "A yellow kite climbs above the windy beach.", "yellow"),
    (90, 125, "A green lizard basks on a warm rock.", "green"),
]
VIDEOS = {"chap__c1": ("chap/c1.mp4", 140, C1), "chap__c2": ("chap/c2.mp4", 130, C2)}
FAST = {"model": "wire", "concurrency": 1, "backoff_s": 0.01, "max_backoff_s": 5, "timeout_s": 1.5}


def expected_annotation() -> list[dict]:
    """By hand: 3 segments give the server's 3 one-segment events (theme `Event k`, the segment's text)."""
    videos = {"qa__q1": ("qa/q1.mp4", 150, [(s, e, answer, c) for s, e, _, answer, c in QA]), **VIDEOS}
    return [
        {
            "video_id": uid,
            "path": path,
            "duration": duration,
            "split": "test",
            "summary_method": "llm-summary",
            "events": [
                {"theme": f"Event {k}", "description": text, "timestamp": [start, end]}
                for k, (start, end, text, _) in enumerate(segments)
            ],
        }
        for uid, (path, duration, segments) in sorted(videos.items())
    ]


def make_inputs(root: Path, chat: dict) -> Path:
    """The sources, their videos (each interval shows the colour its text names) and BUILD.yaml."""
    for name, duration, shown in (
        ("qa/q1", 150, [(s, e, c) for s, e, _, _, c in QA]),
        ("chap/c1", 140, [(s, e, c) for s, e, _, c in C1]),
        ("chap/c2", 130, [(s, e, c) for s, e, _, c in C2]),
    ):
        write_colour_video(root / "videos" / f"{name}.mp4", duration, shown)
    chapters = [
        {"video_id": vid, "duration": duration, "chapters": [{"start": s, "end": e, "title": t} for s, e, t, _ in rows]}
        for vid, duration, rows in (("c1", 140, C1), ("c2", 130, C2))
    ]
    qa = [
        {
            "video_id": "q1",
            "duration": 150,
            "qa": [{"start": s, "end": e, "question": q, "answer": a} for s, e, q, a, _ in QA],
        }
    ]
    (root / "chapters.json").write_text(json.dumps(chapters))
    (root / "qa.json").write_text(json.dumps(qa))
    config = {
        "sources": [
            {"name": "qa", "format": "qa", "annotation": "qa.json", "videos": "videos/qa"},
            {"name": "chap", "format": "chapters", "annotation": "chapters.json", "videos": "videos/chap"},
        ],
        "video_root": "videos",
        "v2t": {"embedder": {"class_path": "helpers.melon_build_fixture.ColourEmbedder"}},
        "split": {"test_fraction": 1.0},
        "llm": {"judge_frames": 1},
        "chat": chat,
    }
    path = root / "build.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


class WireServer:
    """tests/helpers/openai_wire_server.py as a process with fault plan `plan`; its log under `state`."""

    def __init__(self, state: Path, plan: dict[str, list[dict]] | None = None) -> None:
        state.mkdir(parents=True)
        self.state = state
        (state / "plan.json").write_text(json.dumps(plan or {}))
        self.process = subprocess.Popen([sys.executable, str(SERVER), str(state / "plan.json"), str(state)])
        deadline = time.monotonic() + 30
        while not (state / "port").exists():
            assert self.process.poll() is None and time.monotonic() < deadline, "the wire server did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{(state / 'port').read_text()}/v1"

    def log(self, event: str = "received") -> list[dict]:
        path = self.state / "requests.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [entry for entry in map(json.loads, lines) if entry["event"] == event]

    def per_item(self, stage: str) -> list[int]:
        """Requests received per item of `stage`, in the order the items first arrived."""
        return list(Counter(e["item"] for e in self.log() if e["stage"] == stage).values())

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def __enter__(self) -> WireServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.poll() is None:
            self.kill()


def with_url(config: Path, url: str) -> None:
    """Point the build config at the server on `url` (a fresh server listens on another port)."""
    raw = yaml.safe_load(config.read_text())
    config.write_text(yaml.safe_dump({**raw, "chat": {**raw["chat"], "url": url}}))


def build_melon(config: Path, out: Path, **popen: object) -> subprocess.Popen:
    """`lit-retrieval build-melon` as its own process (the V2T embedder imports from tests/)."""
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)
    command = [sys.executable, "-m", "lit_retrieval", "build-melon", "--config", str(config), "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def finished(process: subprocess.Popen) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=120)
    return process.returncode, stdout, stderr


def stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def calls_by_stage(build_stats: dict) -> dict[str, int]:
    """build-melon's own count of calls per stage over every run of the build (`OUT/stats.json`)."""
    return {stage: row["calls"] for stage, row in build_stats["llm"].items()}


def received_by_stage(*servers: WireServer) -> dict[str, int]:
    """The servers' count of requests per stage, in build-melon's stage names."""
    return dict(Counter(e["stage"].replace("_", "-") for server in servers for e in server.log()))


def annotation(out: Path) -> list[dict]:
    return json.loads((out / "annotations.json").read_text())["videos"]


# concurrency 1, so a stage's faults go in turn to its requests in the build's video order (q1, c1, c2);
# `{}` is a valid answer
FAULTS = {
    # a 5xx burst on the first caption
    "qa_to_caption": [{"status": 503}, {"status": 502}, {"status": 500}],
    # 429 with Retry-After 1 s; a body cut mid-JSON; an answer outside the schema 4 times (max_retries 3)
    "summarise": [
        {"status": 429, "retry_after": 1},
        {},
        {"body": '{"id": "chatcmpl-1", "choices": [{"message": '},
        {},
        *[{"content": json.dumps({"events": []})}] * 4,
    ],
    # an answer slower than timeout_s (1.5 s), then one inside it; a non-JSON answer
    "judge": [{"slow_s": 5}, {"slow_s": 0.5}, {"content": "Sure! All events are consistent."}],
}


class Scenario:
    """One build folder, its config and the servers and runs it saw (code, stdout, stderr, stats.json)."""

    def __init__(self, root: Path, plan: dict | None = None, **chat: object) -> None:
        self.root = root
        self.out = root / "out"
        self.servers = [WireServer(root / "server-0", plan)]
        self.config = make_inputs(root, {"url": self.servers[0].url, **FAST, **chat})
        self.runs: list[tuple[int, str, str, dict | None]] = []
        self.wrote: list[bool] = []  # whether OUT/annotations.json existed after each run
        self.process: subprocess.Popen | None = None

    def start(self, plan: dict | None = None) -> None:
        """A run of build-melon; after the first, against a fresh server (another port)."""
        if self.runs:
            self.servers.append(WireServer(self.root / f"server-{len(self.runs)}", plan))
            with_url(self.config, self.servers[-1].url)
        self.process = build_melon(self.config, self.out)

    def finish(self) -> None:
        code, stdout, stderr = finished(self.process)
        self.runs.append((code, stdout, stderr, stats(self.out) if (self.out / "stats.json").exists() else None))
        self.wrote.append((self.out / "annotations.json").exists())
        self.servers[-1].__exit__()


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory) -> dict[str, Scenario]:
    """The builds, run side by side (each waits on its interpreter's start, ~10 s): `clean` (one run),
    `faults` (FAULTS, then a clean server), `killed` (its server SIGKILLed while it holds the second
    summary, then a fresh server)."""
    root = tmp_path_factory.mktemp("wire")
    runs = {
        "clean": Scenario(root / "clean"),
        "faults": Scenario(root / "faults", FAULTS, max_retries=3),
        "killed": Scenario(root / "killed", {"summarise": [{}, {"slow_s": 60}]}, timeout_s=120, max_retries=2),
    }
    try:
        for scenario in runs.values():
            scenario.start()
        killed = runs["killed"]
        deadline = time.monotonic() + 120
        while len([e for e in killed.servers[0].log() if e["stage"] == "summarise"]) < 2:
            assert killed.process.poll() is None, killed.process.communicate()
            assert time.monotonic() < deadline, "the build never asked a second summary"
            time.sleep(0.02)
        killed.servers[0].kill()
        for scenario in runs.values():
            scenario.finish()
        for name in ("faults", "killed"):
            runs[name].start()
        for name in ("faults", "killed"):
            runs[name].finish()
        yield runs
    finally:
        for scenario in runs.values():
            if scenario.process is not None and scenario.process.poll() is None:
                scenario.process.kill()
            for server in scenario.servers:
                server.__exit__()


def test_a_clean_server_gives_the_annotation_with_one_request_per_item(scenarios):
    clean = scenarios["clean"]
    (code, stdout, stderr, build_stats), server = clean.runs[0], clean.servers[0]
    assert (code, stderr) == (0, ""), stdout + stderr  # progress on stdout, nothing on stderr
    assert annotation(clean.out) == expected_annotation()
    assert [server.per_item(s) for s in ("qa_to_caption", "summarise", "judge")] == [[1, 1, 1]] * 3
    assert len(server.log("answered")) == 9
    expected = {"qa-to-caption": 3, "summarise": 3, "judge": 3}
    assert calls_by_stage(build_stats) == received_by_stage(server) == expected
    assert json.loads(re.search(r"LLM calls \(this run\) (\{.*\})", stdout).group(1)) == expected


def test_5xx_429_malformed_and_slow_answers_are_retried_and_counted_as_the_server_saw(scenarios):
    faults = scenarios["faults"]
    (code, stdout, stderr, build_stats), server = faults.runs[0], faults.servers[0]
    assert (code, stderr) == (1, ""), stdout + stderr  # 1: a video failed (below)
    assert server.per_item("qa_to_caption") == [4, 1, 1]
    assert server.per_item("summarise") == [2, 2, 4]
    assert server.per_item("judge") == [2, 2]  # the video that failed its summary is not judged
    received = server.log()
    limited = [e["t"] for e in received if e["stage"] == "summarise"][:2]  # the 429 and its retry
    assert limited[1] - limited[0] >= 1.0, "Retry-After not honoured"
    slow = [e["t"] for e in received if e["stage"] == "judge"][:2]
    assert 1.5 <= slow[1] - slow[0] < 5, "the slow answer was not given up at timeout_s"
    assert {stage: row["retries"] for stage, row in build_stats["llm_this_run"].items()} == {
        "qa-to-caption": {"http 500": 1, "http 502": 1, "http 503": 1},
        "summarise": {"http 429": 1, "response": 1, "schema": 3},
        "judge": {"malformed": 1, "timeout": 1},
    }
    assert calls_by_stage(build_stats) == received_by_stage(server) == {"qa-to-caption": 6, "summarise": 8, "judge": 4}


def test_an_exhausted_request_names_its_video_and_only_it_is_asked_again(scenarios):
    faults = scenarios["faults"]
    code, stdout, _, _ = faults.runs[0]
    failed = [line for line in stdout.splitlines() if line.startswith("failed at")]
    assert failed == [
        "failed at summarise: chap__c2: no valid answer after 4 attempt(s); last: schema: at events: [] is too short"
    ], stdout
    code, stdout, stderr, build_stats = faults.runs[1]
    assert (code, stderr) == (0, ""), stdout + stderr
    assert received_by_stage(faults.servers[1]) == {"summarise": 1, "judge": 1}
    assert annotation(faults.out) == expected_annotation()
    assert calls_by_stage(build_stats) == received_by_stage(*faults.servers)


def test_a_server_killed_mid_stage_ends_the_build_in_one_line_and_a_rerun_resumes(scenarios):
    killed = scenarios["killed"]
    (code, stdout, stderr, build_stats), (first, second) = killed.runs[0], killed.servers
    assert "Traceback" not in stdout + stderr
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stdout + stderr
    assert f"{first.url}/chat/completions: the server stopped accepting connections (summarise: video " in stderr
    assert build_stats is None and killed.wrote == [False, True]  # the killed run's write did not run
    assert received_by_stage(first) == {"qa-to-caption": 3, "summarise": 2}  # the third summary never sent
    answered = {e["item"] for e in first.log("answered")}
    assert len(answered) == 4  # 3 captions and 1 summary
    code, stdout, stderr, build_stats = killed.runs[1]
    assert (code, stderr) == (0, ""), stdout + stderr
    assert not {e["item"] for e in second.log()} & answered  # nothing answered before is asked again
    assert received_by_stage(second) == {"summarise": 2, "judge": 3}
    assert annotation(killed.out) == expected_annotation()
    assert (
        calls_by_stage(build_stats)
        == received_by_stage(first, second)
        == {
            "qa-to-caption": 3,
            "summarise": 4,
            "judge": 3,
        }
    )
