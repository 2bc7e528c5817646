import json
from collections import Counter

import numpy as np
import pytest

from lit_retrieval.data.annotations import load_annotations
from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
from lit_retrieval.data.media.video import sample_frames


def test_corpus_structure(corpus):
    videos = load_annotations(corpus / "annotations.json")
    assert len(videos) == 24
    assert Counter(v.split for v in videos) == {"train": 17, "test": 7}
    assert all(3 <= len(v.events) <= 5 for v in videos)
    durations = [v.duration for v in videos]
    assert max(durations) / min(durations) >= 2  # some videos several times longer
    for video in videos:
        assert (corpus / video.path).is_file()
        bounds = sorted(b for e in video.events for iv in e.intervals for b in iv)
        inner = sorted(set(bounds) - {0.0, video.duration})
        assert list(video.cuts) == inner  # hard cuts exactly at the event boundaries


def test_events_shared_across_videos_full_queries_unique():
    cfg = SynthConfig(num_videos=300, seed=0)
    from lit_retrieval.data.datasets.synthetic import assign_events, make_event_pool

    rng = np.random.default_rng(cfg.seed)
    counts = rng.integers(3, 6, cfg.num_videos)
    pool = make_event_pool(int(np.ceil(counts.sum() / 4.5)), rng)
    videos = assign_events(counts, len(pool), cfg.occurrences, rng)
    occurrences = Counter(e for v in videos for e in v)
    assert np.mean([3 <= c <= 6 for c in occurrences.values()]) > 0.8
    assert all(len(set(v)) == len(v) for v in videos)
    assert len({frozenset(v) for v in videos}) == len(videos)  # full queries identify the video
    assert np.mean([c > 1 for c in occurrences.values()]) > 0.95  # single events are ambiguous
    descriptions = {p.description for p in pool}
    assert len({d.split()[0] for d in descriptions}) >= 4  # several templates in use


def test_deterministic_for_a_seed(tmp_path, corpus):
    from tests.conftest import SMALL

    again = generate_corpus(tmp_path, SMALL, workers=2, progress=False)
    assert load_annotations(again) == load_annotations(corpus / "annotations.json")
    first = load_annotations(again)[0]
    a = sample_frames(tmp_path / first.path, 6).frames
    b = sample_frames(corpus / first.path, 6).frames
    assert np.array_equal(a, b)


def test_occurrences_flag_deals_each_event_into_that_many_videos(tmp_path):
    """`synth --occurrences 5 6`: 12 videos of 3 events are 36 slots, so the pool holds
    ceil(36 / 5.5) = 7 events, each in about 5-6 videos (MELON's shared events, issue 41's corpus);
    the default (3-6) spreads the same slots over more events."""
    from lit_retrieval.commands.synth import run

    found = {}
    for name, extra in (("shared", ["--occurrences", "5", "6"]), ("default", [])):
        out = tmp_path / name
        argv = ["--out", str(out), "--num-videos", "12", "--events", "3", "3", "--size", "32", "--workers", "1"]
        assert run([*argv, *extra, "--quiet"]) == 0
        videos = json.loads((out / "annotations.json").read_text())["videos"]
        ids = [[event["event_id"] for event in video["events"]] for video in videos]
        assert all(len(set(v)) == len(v) == 3 for v in ids)
        found[name] = Counter(e for v in ids for e in v)
    assert len(found["shared"]) <= 7 and sum(found["shared"].values()) / len(found["shared"]) >= 36 / 7
    assert len(found["default"]) > len(found["shared"])


@pytest.mark.parametrize("flag", ["--events", "--occurrences"])
def test_a_reversed_range_is_refused(flag, tmp_path, capsys):
    from lit_retrieval.commands.synth import run

    with pytest.raises(SystemExit) as refused:
        run(["--out", str(tmp_path), flag, "6", "5"])
    assert refused.value.code == 2
    assert f"{flag} MIN MAX needs 1 <= MIN <= MAX, got 6 5" in capsys.readouterr().err


def test_a_folder_written_with_other_settings_is_refused_and_kept(tmp_path):
    """A corpus of 3 videos (seed 1), then 4 asked into the same folder: video syn_00000 would be another
    video under the new settings, so the second call is refused, naming the file and the difference, and
    writes nothing."""
    generate_corpus(tmp_path, SynthConfig(num_videos=3, seed=1), workers=1, progress=False)
    before = {p.name: p.read_bytes() for p in (tmp_path / "videos").iterdir()}
    with pytest.raises(
        ValueError, match=r"synthetic.json: written with other settings \(num_videos 3 there, 4 asked\)"
    ):
        generate_corpus(tmp_path, SynthConfig(num_videos=4, seed=1), workers=1, progress=False)
    assert {p.name: p.read_bytes() for p in (tmp_path / "videos").iterdir()} == before
    assert json.loads((tmp_path / "synthetic.json").read_text())["num_videos"] == 3
    generate_corpus(tmp_path, SynthConfig(num_videos=3, seed=1), workers=1, progress=False)  # same settings: resumes
