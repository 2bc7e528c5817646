"""YouCook2 per-segment retrieval on a fixture in the release's layout (`youcookii_annotations_trainval.json`,
`raw_videos/{subset}/{recipe_type}/{VIDEO}.{ext}`), and build-melon reading it through the same parser."""

import json
from pathlib import Path

import pytest
import torch
import yaml

from lit_retrieval.commands import run_command
from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.youcook2 import YouCook2DataModule, YouCook2Parser
from lit_retrieval.data.records import AnnotationError
from lit_retrieval.melon_build.config import CollectConfig, SourceConfig
from lit_retrieval.melon_build.sources import collect
from helpers.media import write_noise_video
from helpers.multi_caption import CLIP4CLIP_RECIPE, shipped_recipe


def entry(subset, recipe, duration, segments):
    """One `database` entry as released: the segment list with ids, and the video's URL."""
    annotations = [{"segment": [s, e], "id": k, "sentence": t} for k, (s, e, t) in enumerate(segments)]
    return {"duration": duration, "subset": subset, "recipe_type": recipe, "annotations": annotations}


def release(**overrides):
    database = {
        "GLd3aX16zBg": entry(
            "training",
            "113",
            12.0,
            [(1, 4, "spread margarine on two slices of white bread"), (5, 9, "place a slice of cheese on the bread")],
        ),
        "xHr8X2Wpmno": entry(
            "validation",
            "201",
            12.0,
            [(0, 3, "cut the chicken into pieces"), (4, 8, "fry the chicken in oil"), (8, 12, "add the sauce")],
        ),
        "V53XmPeyjIU": entry("validation", "201", 12.0, [(2, 6, "boil the noodles in water")]),
    }
    database.update(overrides)
    for raw in database.values():
        if isinstance(raw, dict):
            raw["video_url"] = "https://www.youtube.com/watch?v=..."
    return {"database": database}


def write(root: Path, data) -> Path:
    path = root / "youcookii_annotations_trainval.json"
    path.write_text(json.dumps(data))
    return path


@pytest.fixture
def videos(tmp_path):
    """The release's downloader layout; one video saved as .mkv."""
    for name in ("training/113/GLd3aX16zBg.mp4", "validation/201/xHr8X2Wpmno.mp4", "validation/201/V53XmPeyjIU.mkv"):
        (tmp_path / "raw_videos" / name).parent.mkdir(parents=True, exist_ok=True)
        write_noise_video(tmp_path / "raw_videos" / name, seconds=12.0, fps=4)
    return tmp_path / "raw_videos"


def test_one_record_per_segment_its_window_inside_the_whole_video(tmp_path, videos):
    records = YouCook2Parser(videos).load(write(tmp_path, release()))
    assert [r.video_id for r in records] == [
        "GLd3aX16zBg#0",
        "GLd3aX16zBg#1",
        "xHr8X2Wpmno#0",
        "xHr8X2Wpmno#1",
        "xHr8X2Wpmno#2",
        "V53XmPeyjIU#0",
    ]
    fry = records[3]
    assert (fry.split, fry.path, fry.duration, fry.window) == ("test", "validation/201/xHr8X2Wpmno.mp4", 12.0, (4, 8))
    assert fry.descriptions == ["fry the chicken in oil"] and fry.events[0].intervals == ((4.0, 8.0),)
    assert records[5].path == "validation/201/V53XmPeyjIU.mkv" and records[0].split == "train"
    flat = YouCook2Parser(videos, {"validation": "val"}, file_layout="flat").load(write(tmp_path, release()))
    assert {r.split for r in flat} == {"val"} and flat[0].path == "xHr8X2Wpmno.mp4"


def test_the_data_module_samples_each_segment_within_its_window(tmp_path, videos):
    data = YouCook2DataModule(str(write(tmp_path, release())), num_frames=4, image_size=32, batch_size=2)
    data.setup()
    test = data.datasets["test"]
    assert len(test) == 4 and len(data.datasets["train"]) == 2
    # segment [4, 8] of a 4 fps video: bin centres 4.5, 5.5, 6.5, 7.5, each a frame's time
    assert test[1]["frame_times"].tolist() == pytest.approx([4.5, 5.5, 6.5, 7.5])
    assert test[1]["events"] == ["fry the chicken in oil"]


def test_the_release_fixture_loads_with_counts_and_windows_worked_out_from_its_file():
    fixture = Path(__file__).parents[2] / "fixtures" / "youcook2" / "youcookii_annotations_trainval.json"
    data = YouCook2DataModule(str(fixture), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 3, "test": 3}
    records = data.load_records(RecordCollector())
    last = {r.split: (r.video_id, r.path, r.duration, r.window, r.descriptions[0]) for r in records}
    assert last == {
        "train": (
            "GLd3aX16zBg#2",
            "training/113/GLd3aX16zBg.mp4",
            241.62,
            (132, 138),
            "place the bread slices on top of each other and place in a hot pan",
        ),
        # `validation` is the test split; this segment ends exactly at its video's end, which is inside it
        "test": ("V53XmPeyjIU#0", "validation/201/V53XmPeyjIU.mp4", 95.0, (80, 95), "pour the sauce over the noodles"),
    }


@pytest.mark.parametrize(
    ("segment", "sentence", "reason"),
    [
        ([8, 13], "add the sauce", "interval end 13 is past the duration 12"),
        ([-1, 3], "add the sauce", "interval [-1, 3] needs 0 <= start < end"),
        ([8, 12], ["add", "the sauce"], "'sentence' must be a non-empty string"),
        ([8, 12], "  ", "'sentence' must be a non-empty string"),
    ],
)
def test_a_bad_segment_names_file_and_segment_and_skip_drops_its_video(tmp_path, videos, segment, sentence, reason):
    data = release()
    data["database"]["xHr8X2Wpmno"]["annotations"][2].update(segment=segment, sentence=sentence)
    path = write(tmp_path, data)
    with pytest.raises(
        AnnotationError, match=rf"{path}: record 'xHr8X2Wpmno annotation 2': .*{reason}".replace("[", r"\[")
    ):
        YouCook2Parser(videos).load(path)
    collector = RecordCollector("skip")
    records = YouCook2Parser(videos).load(path, collector)
    assert [e.record for e in collector.dropped] == ["xHr8X2Wpmno annotation 2"]
    assert sorted({r.video_id.split("#")[0] for r in records}) == ["GLd3aX16zBg", "V53XmPeyjIU"]


def test_a_video_listed_twice_and_a_segment_id_repeated_are_refused(tmp_path, videos):
    text = json.dumps(release())
    twice = text.replace('"V53XmPeyjIU"', '"xHr8X2Wpmno"')  # two entries under one key
    path = tmp_path / "twice.json"
    path.write_text(twice)
    with pytest.raises(AnnotationError, match=rf"{path}: not valid JSON \(duplicate key 'xHr8X2Wpmno'\)"):
        YouCook2Parser(videos).load(path)
    data = release()
    data["database"]["xHr8X2Wpmno"]["annotations"][2]["id"] = 1
    with pytest.raises(AnnotationError, match="record 'xHr8X2Wpmno annotation 2': segment id 1 listed again"):
        YouCook2Parser(videos).load(write(tmp_path, data))


def test_missing_file_unknown_subset_and_bad_layout_are_one_line_errors(tmp_path, videos):
    with pytest.raises(AnnotationError, match=r"nope\.json: annotation file not found"):
        YouCook2Parser(videos).load(tmp_path / "nope.json")
    data = release()
    del data["database"]["V53XmPeyjIU"]["subset"]
    with pytest.raises(
        AnnotationError, match=r"record 'V53XmPeyjIU': 'subset' must be one of \['training', 'validation'\]"
    ):
        YouCook2Parser(videos).load(write(tmp_path, data))
    data["database"]["V53XmPeyjIU"]["subset"] = "testing"  # a subset this run does not use: left out, not bad
    assert len(YouCook2Parser(videos).load(write(tmp_path, data))) == 5
    with pytest.raises(Exception, match="data.file_layout must be 'release' or 'flat', got 'tree'"):
        YouCook2DataModule(str(tmp_path / "a.json"), file_layout="tree")


def test_build_melon_reads_youcook2_through_the_dataset_parser(tmp_path):
    data = release()
    data["database"]["xHr8X2Wpmno"]["annotations"][2]["segment"] = [8, 13]
    data["database"]["V53XmPeyjIU"]["annotations"][0]["sentence"] = 7  # kept as written: build-melon's rule judges it
    source = SourceConfig(name="cook", format="youcook2", annotation=str(write(tmp_path, data)), videos=str(tmp_path))
    _, removed, counts = collect([source], CollectConfig(min_seconds=1, min_segments=1))
    reasons = {r.video: (r.reason, r.detail) for r in removed}
    assert reasons["xHr8X2Wpmno annotation 2"] == ("invalid_record", "interval end 13 is past the duration 12")
    assert reasons["V53XmPeyjIU"] == ("broken_description", "not text: 7")
    assert counts["cook"]["raw"] == 3


def test_the_clip4clip_config_resolves_to_the_short_clip_recipe(capsys):
    recipe = {**CLIP4CLIP_RECIPE}  # README's short-clip scripts (no YouCook2 one)
    assert shipped_recipe("youcook2_clip4clip.yaml", capsys) == (
        "lit_retrieval.data.datasets.youcook2.YouCook2DataModule",
        recipe,
    )


def test_cache_frames_caches_every_segment_window_and_reads_back_its_frames(tmp_path, videos):
    data = {"annotation": str(write(tmp_path, release())), "num_frames": 3, "image_size": 32}
    config = {
        "model": {
            "class_path": "lit_retrieval.modules.DualEncoderRetrieval",
            "init_args": {
                "encoder": {"class_path": "lit_retrieval.models.encoders.CLIPEncoder", "init_args": {}},
                "head": {"class_path": "lit_retrieval.models.heads.MeanPHead"},
            },
        },
        "data": {"class_path": "lit_retrieval.data.datasets.youcook2.YouCook2DataModule", "init_args": data},
    }
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
    assert (
        run_command("cache-frames", ["--config", str(tmp_path / "train.yaml"), "--out", str(tmp_path / "cache")]) == 0
    )
    plain = YouCook2DataModule(**data)
    cached = YouCook2DataModule(**data, frame_cache=str(tmp_path / "cache"))
    plain.setup(), cached.setup()
    assert len(cached.datasets["test"].frame_cache) == 6  # one entry per segment window, two of them one video's
    for role in ("train", "test"):
        for i in range(len(plain.datasets[role])):
            want, got = plain.datasets[role][i], cached.datasets[role][i]
            assert torch.equal(want["frames"], got["frames"]) and torch.equal(want["frame_times"], got["frame_times"])
