"""Charades (Charades-STA sentences) on fixtures in the release's layout: `charades_sta_*.txt` lines
`VIDEO START END##SENTENCE`, lengths from `Charades_v1_*.csv`, videos in `Charades_v1_480/`; and one
multi-caption `test` run through the CLI over real mp4 files."""

import csv
from pathlib import Path

import numpy as np
import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.charades import CharadesDataModule, CharadesParser, read_lengths
from lit_retrieval.data.records import AnnotationError
from helpers.media import write_noise_video
from helpers.multi_caption import CLIP4CLIP_RECIPE, cli_test, shipped_recipe

HEADER = ["id", "subject", "scene", "quality", "relevance", "verified", "script", "objects", "descriptions"]
HEADER += ["actions", "length"]
TEST = {  # video -> STA lines (file order), lengths 4 s
    "AO8RW": [(1.2, 3.5, "a person is putting a book on a shelf."), (0.0, 1.9, "person begins to play on a phone.")],
    "Y6R7T": [(0.0, 2.0, "a person opens a door."), (2.1, 4.0, "the person sits down."), (0.5, 1.5, "they smile.")],
    "3MSZA": [(0.3, 2.8, "person eats a sandwich.")],
}
TRAIN = {"ZZXQF": [(0.0, 3.0, "a person walks in.")], "KRF68": [(1.0, 2.0, "person holds a broom.")]}


def sta_lines(videos: dict) -> list[str]:
    return [f"{v} {s:.1f} {e:.1f}##{t}" for v, moments in videos.items() for s, e, t in moments]


def write_lengths(path: Path, lengths: dict[str, str]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for video, length in lengths.items():
            writer.writerow(
                [video, "HR43", "Kitchen", "6", "7", "Yes", "A person...", "book;shelf", "A person...", "", length]
            )


@pytest.fixture
def release(tmp_path):
    (tmp_path / "charades_sta_test.txt").write_text("\n".join(sta_lines(TEST)) + "\n")
    (tmp_path / "charades_sta_train.txt").write_text("\n".join(sta_lines(TRAIN)) + "\n")
    write_lengths(tmp_path / "Charades_v1_test.csv", {v: "4.00" for v in TEST})
    write_lengths(tmp_path / "Charades_v1_train.csv", {v: "4.00" for v in TRAIN})
    return tmp_path


def lengths_of(root: Path) -> dict[str, float]:
    collector = RecordCollector()
    return {
        **read_lengths(root / "Charades_v1_test.csv", collector),
        **read_lengths(root / "Charades_v1_train.csv", collector),
    }


def test_paragraph_records_take_a_video_s_sentences_in_time_order(release):
    records = CharadesParser().load(release / "charades_sta_test.txt", "test", lengths_of(release))
    assert [r.video_id for r in records] == ["AO8RW", "Y6R7T", "3MSZA"]
    first = records[0]
    assert (first.path, first.duration, first.split) == ("AO8RW.mp4", 4.0, "test")
    assert first.descriptions == ["person begins to play on a phone.", "a person is putting a book on a shelf."]
    assert [e.intervals for e in first.events] == [((0.0, 1.9),), ((1.2, 3.5),)]
    assert records[1].descriptions == ["a person opens a door.", "they smile.", "the person sits down."]


def test_the_release_fixture_loads_with_counts_worked_out_from_its_files():
    fixture = Path(__file__).parents[2] / "fixtures" / "charades"  # tests/fixtures/charades: the release's file names
    data = CharadesDataModule(str(fixture), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 2, "test": 2}
    records = data.load_records(RecordCollector())
    last = records[-1]  # 3MSZA: its sentences in time order, the end 30.4 clipped to the CSV's length 29.62
    assert (last.split, last.video_id, last.duration) == ("test", "3MSZA", 29.62)
    assert last.descriptions == ["a person is opening a cabinet.", "person turns the light off."]
    assert [e.intervals for e in last.events] == [((0.0, 5.2),), ((24.3, 29.62),)]
    assert records[0].descriptions == ["a person walks into the room.", "person sits down on a chair."]
    sentences = CharadesDataModule(str(fixture), query="sentence", num_frames=2, image_size=32)
    sentences.setup()
    assert {role: len(ds) for role, ds in sentences.datasets.items()} == {"train": 3, "test": 4}


def test_sentence_records_share_their_video_in_test_and_not_in_train(release):
    parser = CharadesParser(query="sentence")
    test = parser.load(release / "charades_sta_test.txt", "test", lengths_of(release))
    assert [r.video_id for r in test] == ["AO8RW"] * 2 + ["Y6R7T"] * 3 + ["3MSZA"]
    assert [r.descriptions for r in test[:2]] == [[t] for _, _, t in TEST["AO8RW"]]
    train = parser.load(release / "charades_sta_train.txt", "train", lengths_of(release))
    assert [r.video_id for r in train] == ["ZZXQF#0", "KRF68#0"]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("Y6R7T 2.1 6.5##the person sits down.", "interval end 6.5 is past the duration 4"),
        ("Y6R7T 2.1##the person sits down.", "expected 'VIDEO START END##SENTENCE'"),
        ("Y6R7T 2.1 3.0 the person sits down.", "expected 'VIDEO START END##SENTENCE'"),
        ("Y6R7T 2.1 x##the person sits down.", "time 'x' is not a number"),
        ("Y6R7T 4.0 4.5##the person sits down.", "moment starts at 4 s, at or past the video's length 4 s"),
        ("Y6R7T 2.1 3.0##  ", "empty sentence"),
    ],
)
def test_a_bad_line_names_file_line_and_video_and_drops_its_paragraph(release, bad, reason):
    lines = sta_lines(TEST)
    lines[3] = bad
    path = release / "bad_sta.txt"
    path.write_text("\n".join(lines))
    with pytest.raises(AnnotationError, match=rf"{path}: record 'line 4 \(Y6R7T\)': {reason}"):
        CharadesParser().load(path, "test", lengths_of(release))
    collector = RecordCollector("skip")
    kept = CharadesParser().load(path, "test", lengths_of(release), collector)
    assert [r.video_id for r in kept] == ["AO8RW", "3MSZA"] and len(collector.dropped) == 1
    sentences = CharadesParser(query="sentence").load(path, "test", lengths_of(release), RecordCollector("skip"))
    assert len(sentences) == 5  # only the bad sentence is lost


def test_an_end_just_past_the_length_is_clipped_and_a_missing_length_is_bad(release):
    path = release / "past.txt"
    path.write_text("Y6R7T 2.1 4.3##the person sits down.\nNOLEN 0.0 1.0##someone.\n")
    # STA rounds ends up: 0.3 s past the 4 s video is within the 2 s tolerance
    records = CharadesParser().load(path, "test", lengths_of(release), RecordCollector("skip"))
    assert [r.events[0].intervals for r in records] == [((2.1, 4.0),)]
    with pytest.raises(AnnotationError, match=r"record 'line 1 \(Y6R7T\)': interval end 4.3 is past the duration 4"):
        CharadesParser(end_tolerance=0).load(path, "test", lengths_of(release))
    with pytest.raises(AnnotationError, match=r"record 'line 2 \(NOLEN\)': video has no length in the length files"):
        CharadesParser().load(path, "test", lengths_of(release))


def test_a_video_listed_twice_in_a_length_file_and_a_missing_split_file(release):
    write_lengths(release / "Charades_v1_test.csv", {"AO8RW": "4.00", "Y6R7T": "4.00"} | {"Y6R7T ": "5"})
    with pytest.raises(AnnotationError, match=r"Charades_v1_test\.csv: record 'line 4 \(Y6R7T\)': video listed again"):
        read_lengths(release / "Charades_v1_test.csv", RecordCollector())
    data = CharadesDataModule(str(release), {"test": "charades_sta_val.txt"})
    with pytest.raises(AnnotationError, match=r"charades_sta_val\.txt: annotation file not found"):
        data.load_records(RecordCollector("skip"))
    with pytest.raises(Exception, match="data.query must be 'paragraph' or 'sentence', got 'both'"):
        CharadesDataModule(str(release), query="both")


def test_a_multi_caption_test_run_has_one_gallery_video_per_video_and_one_query_per_sentence(
    release, tiny_clip, tmp_path
):
    for video in [*TEST, *TRAIN]:
        (release / "Charades_v1_480").mkdir(exist_ok=True)
        write_noise_video(release / "Charades_v1_480" / f"{video}.mp4", seconds=4.0, fps=4, seed=ord(video[0]))
    data = {"annotation_dir": str(release), "query": "sentence", "num_frames": 2, "image_size": 32, "batch_size": 4}
    (tmp_path / "run").mkdir()
    scores, ids, metrics = cli_test(
        tmp_path / "run",
        tiny_clip,
        {"class_path": "lit_retrieval.data.datasets.charades.CharadesDataModule", "init_args": data},
    )
    assert scores.shape == (6, 3) and ids["video_ids"] == ["AO8RW", "Y6R7T", "3MSZA"]
    assert ids["targets"] == [0, 0, 1, 1, 1, 2] and ids["text_ids"] == ["AO8RW"] * 2 + ["Y6R7T"] * 3 + ["3MSZA"]
    # text-to-video ranks of the six queries, by hand from the saved matrix (optimistic ties)
    ranks = [1 + int((row > row[t]).sum()) for row, t in zip(scores, ids["targets"])]
    assert metrics["t2v/R@1"] == pytest.approx(100 * sum(r == 1 for r in ranks) / 6)
    assert metrics["t2v/MnR"] == pytest.approx(sum(ranks) / 6)
    # CLIP4Clip's group rule: a video is scored by its best caption, ranked among the 3 videos
    best = np.stack([scores[np.array(ids["targets"]) == v].max(0) for v in range(3)])  # [caption group, video]
    group_ranks = [1 + int((best[:, v] > best[v, v]).sum()) for v in range(3)]
    assert metrics["v2t_group_max/MnR"] == pytest.approx(sum(group_ranks) / 3)


def test_the_clip4clip_config_resolves_to_the_paragraph_recipe(capsys):
    recipe = {
        **CLIP4CLIP_RECIPE,
        "max_frames": 64,
        "max_words": 64,
    }  # README's ActivityNet / DiDeMo scripts (no Charades one)
    assert shipped_recipe("charades_clip4clip.yaml", capsys) == (
        "lit_retrieval.data.datasets.charades.CharadesDataModule",
        recipe,
    )
