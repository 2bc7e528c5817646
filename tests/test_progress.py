"""`lit_retrieval.progress`: the plain line's counts, rate and ETA (a fake clock, numbers worked by
hand), when lines are written (every N seconds, every N %), the rich bar in a terminal, and the real
commands without a terminal (stdout to a file: periodic plain lines, no control sequences) and in a pty."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from helpers.cli_server import run_logged
from helpers.terminal import ESCAPE
from lit_retrieval.progress import Every, Progress, format_duration, format_rate, parse_every


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def plain(label: str, total: int, every: Every, clock: FakeClock, **kw) -> tuple[Progress, io.StringIO]:
    stream = io.StringIO()
    return Progress(label, total, every=every, stream=stream, clock=clock, heartbeat=False, **kw), stream


def test_the_line_counts_rate_and_eta_by_hand():
    clock = FakeClock()
    bar, stream = plain("caching frames", 6250, Every(30.0), clock, completed=1000, shard=(3, 16))
    with bar:
        clock.now += 100.0
        bar.advance(204, failed=2)  # 204 in 100 s: 2.04/s; 5,046 left: 2,473.5 s = 41.2 -> 42 min
        assert bar.line() == "shard 3/16: caching frames 1,204/6,250 videos (19%), 2.0/s, ETA 42 min; failed 2"
        bar.set(in_flight=4)
        bar.advance(4096, failed=1)  # 4,300 in 100 s: 43/s; 950 left: 22.09 -> 22 s
        assert bar.line() == (
            "shard 3/16: caching frames 5,300/6,250 videos (85%), 43/s, ETA 22 s; failed 3, in flight 4"
        )
        clock.now += 20.0
        bar.advance(950)
    lines = stream.getvalue().splitlines()
    assert lines[0] == "shard 3/16: caching frames 1,000/6,250 videos (16%)"  # the start, before any rate
    assert lines[-1] == "shard 3/16: caching frames 6,250/6,250 videos (100%), done in 2 min; failed 3, in flight 4"


def test_items_left_to_another_process_count_done_but_not_in_the_rate():
    """A grid of 12 runs, 4 finished before; one is held by another process (skipped at once), then one
    runs for an hour: 1/h here, so the 6 left take 6 h (counting the skipped one, 2/h and 3 h)."""
    clock = FakeClock()
    bar, _ = plain("grid", 12, Every(30.0), clock, completed=4, counts={"left_alone": 0})
    with bar:
        bar.skip(left_alone=1)
        assert bar.line() == "grid 5/12 videos (42%); left alone 1"
        clock.now += 3600.0
        bar.advance()
        assert bar.line() == "grid 6/12 videos (50%), 1/h, ETA 6 h 00 min; left alone 1"


def test_lines_every_n_seconds_and_every_n_percent():
    clock = FakeClock()
    bar, stream = plain("detecting shots", 100, Every(30.0), clock)
    with bar:
        for _ in range(100):  # one video every 2 s: a line at 30 s, 60 s, ..., 180 s
            clock.now += 2.0
            bar.advance()
    done = [int(re.search(r" (\d+)/100", line).group(1)) for line in stream.getvalue().splitlines()]
    assert done == [0, 15, 30, 45, 60, 75, 90, 100]

    bar, stream = plain("detecting shots", 40, Every(None, 25.0), clock)
    with bar:
        for _ in range(40):
            clock.now += 1.0
            bar.advance()
    done = [int(re.search(r" (\d+)/40", line).group(1)) for line in stream.getvalue().splitlines()]
    assert done == [0, 10, 20, 30, 40]  # the end is not written twice


def test_an_unsharded_job_names_no_shard_and_off_writes_nothing():
    clock = FakeClock()
    bar, stream = plain("embedding videos", 2, Every(30.0), clock, shard=(0, 1))
    with bar:
        bar.advance(2)
    assert stream.getvalue().startswith("embedding videos 0/2 videos")
    bar, stream = plain("embedding videos", 2, Every(off=True), clock)
    with bar:
        bar.advance(2)
    assert stream.getvalue() == ""


def test_the_heartbeat_writes_lines_while_no_item_finishes():
    """A stage waiting on its LLM calls still shows them: lines every interval though nothing advanced."""
    stream, calls = io.StringIO(), iter(range(1, 1000))
    with Progress(
        "build-melon judge",
        3,
        every=Every(0.05),
        stream=stream,
        live=lambda: {"llm_calls": next(calls)},
        heartbeat=True,
    ):
        time.sleep(0.5)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 3 and all(line.startswith("build-melon judge 0/3 videos (0%); llm calls ") for line in lines)
    calls_shown = [line.rsplit(" ", 1)[1] for line in lines]
    assert len(set(calls_shown)) == len(calls_shown)  # `live` read again for every line


def test_a_bad_environment_interval_is_one_line_naming_the_variable(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "lit_retrieval", "synth", "--out", str(tmp_path), "--num-videos", "1"],
        env={**os.environ, "LIT_RETRIEVAL_PROGRESS_EVERY": "often"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2 and not (tmp_path / "annotations.json").exists()
    assert result.stderr.strip().splitlines() == [
        "lit-retrieval synth: LIT_RETRIEVAL_PROGRESS_EVERY: "
        "expected a positive interval like 30s, 2min or 5% (or off), got 'often'"
    ]


@pytest.mark.parametrize(
    "text, every",
    [
        ("30s", Every(30.0)),
        ("45", Every(45.0)),
        ("2min", Every(120.0)),
        ("5%", Every(None, 5.0)),
        ("off", Every(None, None, True)),
    ],
)
def test_parse_every(text, every):
    assert parse_every(text) == every


@pytest.mark.parametrize("text", ["0s", "-5%", "soon", "5 hours"])
def test_parse_every_refuses_with_the_forms(text):
    with pytest.raises(ValueError, match="like 30s, 2min or 5%"):
        parse_every(text)


def test_formats():
    assert [format_rate(r) for r in (41.4, 2.46, 0.2, 0.001)] == ["41/s", "2.5/s", "12/min", "3.6/h"]
    assert [format_duration(s) for s in (0.2, 59, 61, 3600, 3 * 3600 + 5 * 60)] == [
        "0 s",
        "59 s",
        "2 min",
        "1 h 00 min",
        "3 h 05 min",
    ]


def test_a_terminal_gets_richs_bar_and_no_lines():
    stream = io.StringIO()
    console = Console(file=stream, force_terminal=True, width=100)
    with Progress("detecting shots", 3, console=console, stream=stream, every=Every(0.001)) as bar:
        bar.advance(3, failed=1)
    out = stream.getvalue()
    assert bar.mode == "bar" and "\x1b[" in out and "━" in out  # rich's live bar
    assert "detecting shots · failed 1" in out and "3/3 videos" not in out


# ---------------------------------------------------------------------- the real commands


def run_to_file(argv: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """`lit-retrieval ARGV` with stdout (and stderr) written to `log`, as under Slurm."""
    with open(log, "a") as handle:  # a new file
        result = run_logged(  # forked from the fork server, with the log as its stdout and stderr
            [sys.executable, "-m", "lit_retrieval", *argv],
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            timeout=600,
        )
    text = log.read_text()
    assert result.returncode in (0, 1), text
    return text


def progress_lines(text: str, label: str) -> list[str]:
    assert not ESCAPE.search(text), text  # no control sequences in a log file
    return [line for line in text.splitlines() if label in line and re.search(r"\d+/\d+ ", line)]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synth")
    text = run_to_file(
        ["synth", "--out", str(root), "--num-videos", "6", "--size", "32", "--workers", "1"], root / "log", root
    )
    lines = progress_lines(text, "writing videos")
    assert lines[0].startswith("writing videos 0/6 videos") and lines[-1].startswith("writing videos 6/6 videos (100%)")
    return root


def test_shots_without_a_terminal_writes_periodic_plain_lines(corpus, tmp_path):
    videos = sorted(str(p) for p in (corpus / "videos").glob("*.mp4"))
    (tmp_path / "bad.mp4").write_bytes(b"not a video")
    argv = ["shots", str(tmp_path / "bad.mp4"), *videos, "--cache", str(tmp_path / "cache"), "--progress-every", "20%"]
    argv += ["--shard", "0", "--num-shards", "2"]  # bad.mp4 and 3 of the 6 videos
    lines = progress_lines(run_to_file(argv, tmp_path / "log", tmp_path), "detecting shots")
    assert [line.split(" (")[0] for line in lines] == [f"shard 0/2: detecting shots {n}/4 videos" for n in range(5)]
    assert re.fullmatch(r".* 4/4 videos \(100%\), done in \d+ s; cached 0, detected 3, failed 1", lines[-1])
    again = progress_lines(run_to_file(argv, tmp_path / "log2", tmp_path), "detecting shots")
    assert len(again) == 1  # all known: the start is the end
    assert re.fullmatch(
        r"shard 0/2: detecting shots 4/4 videos \(100%\), done in 0 s; cached 3, detected 0, failed 1", again[0]
    )


def test_shots_in_a_terminal_draws_richs_bar(corpus, tmp_path):
    """stdout a pty: rich's live bar (control sequences, the bar's glyphs), no plain lines."""
    videos = sorted(str(p) for p in (corpus / "videos").glob("*.mp4"))
    primary, secondary = pty.openpty()
    argv = [sys.executable, "-m", "lit_retrieval", "shots", *videos, "--cache", str(tmp_path / "cache")]
    env = {**os.environ, "TERM": "xterm", "COLUMNS": "120"}
    with subprocess.Popen(argv, stdout=secondary, stderr=secondary, cwd=tmp_path, env=env) as process:
        os.close(secondary)
        out = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the child closed the pty
                break
            if not chunk:
                break
            out += chunk
        assert process.wait(timeout=600) == 0, out
    os.close(primary)
    text = out.decode(errors="replace")
    assert "\x1b[" in text and "━" in text and "detecting shots · cached 0, detected 6, failed 0" in text
    assert "detecting shots 0/6 videos" not in text  # no plain line


def frame_cache_config(corpus: Path, path: Path) -> Path:
    """A training config over the synthetic corpus (parsed by cache-frames, nothing built)."""
    encoder = {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": {}}
    model = {"encoder": encoder, "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"}}
    data = {"annotation": str(corpus / "annotations.json"), "num_frames": 4, "image_size": 24}
    config = {
        "model": {"class_path": "lit_retrieval.modules.DualEncoderRetrieval", "init_args": model},
        "data": {"class_path": "lit_retrieval.data.MultiEventDataModule", "init_args": data},
    }
    path.write_text(json.dumps(config))
    return path


def test_cache_frames_without_a_terminal_writes_periodic_plain_lines(corpus, tmp_path):
    config = frame_cache_config(corpus, tmp_path / "train.yaml")
    argv = ["cache-frames", "--config", str(config), "--out", str(tmp_path / "cache"), "--shard", "1"]
    argv += ["--num-shards", "2"]  # 3 of the 6 videos
    env = {"LIT_RETRIEVAL_PROGRESS_EVERY": "30%"}  # the variable, where no --progress-every is given
    lines = progress_lines(run_to_file(argv, tmp_path / "log", tmp_path, env), "caching frames")
    assert [line.split(" (")[0] for line in lines] == [f"shard 1/2: caching frames {n}/3 videos" for n in range(4)]
    assert re.fullmatch(r".* 3/3 videos \(100%\), done in \d+ s; cached 0, decoded 3, failed 0", lines[-1])
    again = progress_lines(run_to_file(argv, tmp_path / "log2", tmp_path, env), "caching frames")
    assert again == ["shard 1/2: caching frames 3/3 videos (100%), done in 0 s; cached 3, decoded 0, failed 0"]
    assert "caching frames" not in run_to_file([*argv, "--quiet"], tmp_path / "log3", tmp_path)


def test_build_melon_without_a_terminal_writes_each_stages_lines(tmp_path):
    """Each stage's lines; an LLM stage's counts are the requests the server received (one retried)."""
    from helpers.melon_build_endpoint import FakeChatEndpoint, Reply, melon_responder
    from helpers.melon_build_fixture import make_fixture
    from helpers.melon_build_runs import CHAT, build_command, stage_of

    with FakeChatEndpoint(melon_responder()) as server:
        server.script("Question:", Reply(status=503))  # one qa-to-caption attempt retried
        config = make_fixture(tmp_path, {"url": server.url, **CHAT, "concurrency": 2})
        command, env = build_command(config, tmp_path / "out")
        command += ["--stage", "judge", "--progress-every", "1%"]
        with open(tmp_path / "log", "w") as log:
            assert subprocess.run(command, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=600).returncode == 0
        received = [stage_of(r) for r in server.requests]
    text = (tmp_path / "log").read_text()
    for stage in ("qa-to-caption", "t2t", "v2t", "summarise", "judge"):
        lines = progress_lines(text, f"build-melon {stage} ")
        total = int(re.search(r" 0/(\d+) videos", lines[0]).group(1))
        assert len(lines) == total + 1, lines  # the start, then one a video (1 %)
        assert " done in " in lines[-1]
        if stage in ("qa-to-caption", "summarise", "judge"):
            calls = received.count(stage)
            retried = int(stage == "qa-to-caption")
            assert lines[-1].endswith(f"; cached 0, failed 0, in flight 0, llm calls {calls}, retried {retried}")


class CountingEmbedder:
    """Embeds item k as the unit vector (k, 1) normalised, batch by batch; records each call's size."""

    modalities = {"text"}
    fingerprint = "counting"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, items, instruction=None, batch_size=8):
        self.calls.append(len(items))
        vectors = torch.tensor([[float(item.text), 1.0] for item in items])
        return vectors / vectors.norm(dim=-1, keepdim=True)


def test_embed_tracked_shows_items_and_gives_the_vectors_of_one_call(capsys):
    from lit_retrieval.data.items import MediaItem
    from lit_retrieval.search.embedders import embed_tracked

    items = [MediaItem(text=str(k)) for k in range(70)]
    embedder = CountingEmbedder()
    got = embed_tracked(embedder, items, None, 2, "MSRVTT-queries")  # chunks of 16 batches: 32, 32, 6 items
    assert embedder.calls == [32, 32, 6]
    assert torch.equal(got, CountingEmbedder().embed(items))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"embedding MSRVTT-queries {n}/70 items" for n in (0, 70)]


def test_index_without_a_terminal_writes_periodic_plain_lines(corpus, tiny_qwen, tmp_path):
    folder = tmp_path / "videos"
    folder.mkdir()
    for video in sorted((corpus / "videos").glob("*.mp4"))[:3]:
        shutil.copy(video, folder / video.name)
    (folder / "broken.mp4").write_bytes(b"not a video" * 50)  # sorted first: in shard 0 of 2
    argv = ["index", "--model", str(tiny_qwen), "--videos", str(folder), "--out", str(tmp_path / "idx"), "--chunk", "1"]
    argv += ["--shard", "0", "--num-shards", "2", "--embed-only", "--progress-every", "1%"]
    lines = progress_lines(run_to_file(argv, tmp_path / "log", tmp_path), "embedding videos")
    assert [line.split(" (")[0] for line in lines] == [f"shard 0/2: embedding videos {n}/2 videos" for n in range(3)]
    assert lines[1].endswith("; done before 0, skipped 0, failed 1")  # broken.mp4, the shard's first video
    assert re.fullmatch(r".* 2/2 videos \(100%\), done in \d+ s; done before 0, skipped 0, failed 1", lines[-1])
    again = progress_lines(run_to_file(argv, tmp_path / "log2", tmp_path), "embedding videos")
    assert again == ["shard 0/2: embedding videos 2/2 videos (100%), done in 0 s; done before 1, skipped 1, failed 0"]


def test_quiet_library_bars_turns_off_transformers_bars_imported_later_or_before():
    """transformers' (and huggingface_hub's) loading bars are off after `quiet_library_bars`, whether
    transformers is imported after it (then the call itself does not import transformers) or before."""
    after = (
        "import sys\nfrom lit_retrieval.progress import quiet_library_bars\nquiet_library_bars()\n"
        "imported = 'transformers' in sys.modules\nfrom transformers.utils import logging\n"
        "from huggingface_hub.utils import are_progress_bars_disabled\n"
        "print(imported, logging.is_progress_bar_enabled(), are_progress_bars_disabled())"
    )
    before = (
        "from transformers.utils import logging\nfrom lit_retrieval.progress import quiet_library_bars\n"
        "quiet_library_bars()\nprint(logging.is_progress_bar_enabled())"
    )
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True) for code in (after, before)]
    assert [r.stdout.split() for r in runs] == [["False", "False", "True"], ["False"]], [r.stderr[-500:] for r in runs]
