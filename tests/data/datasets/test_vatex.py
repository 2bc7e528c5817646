"""VATEX in its release layout (`vatex_training_v1.0.json` / `vatex_validation_v1.0.json`: lists of
`{videoID, enCap, chCap}`) or CLIP2Video's `vatex_data.json` mapping, with HGR's split lists (clip ids of
the real lists; val and test both come from the validation file)."""

import json
from pathlib import Path

import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.vatex import VATEXDataModule, VATEXParser
from lit_retrieval.data.records import AnnotationError
from helpers.media import write_noise_video
from helpers.multi_caption import CLIP4CLIP_RECIPE, cli_test, shipped_recipe

RELEASE = ("vatex_training_v1.0.json", "vatex_validation_v1.0.json")
SPLITS = {"train": "train_list.txt", "val": "val_list.txt", "test": "test_list.txt"}
LISTS = {
    "train": ["Ptf_2VRj-V0_000122_000132", "CBL6uetTPHg_000089_000099"],
    "val": ["3c0hLqxvSSI_000000_000010"],
    "test": ["nM_ySHgMPW0_000000_000010", "CKUaeC_FWoA_000019_000029", "1y_uKjQmjWg_000020_000030"],
}


def entry(video_id: str, count: int = 10) -> dict:
    return {
        "videoID": video_id,
        "enCap": [f"Caption {k} of clip {video_id}." for k in range(count)],
        "chCap": [f"第{k}句" for k in range(count)],
    }


def write_release(root: Path, lists: dict = LISTS, validation: list | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / RELEASE[0]).write_text(json.dumps([entry(v) for v in LISTS["train"]]))
    held_out = validation if validation is not None else [entry(v) for v in LISTS["val"] + LISTS["test"]]
    (root / RELEASE[1]).write_text(json.dumps(held_out))
    for split, names in lists.items():
        (root / SPLITS[split]).write_text("\n".join(names) + "\n")
    return root


def load(root: Path, collector: RecordCollector | None = None, files: tuple[str, ...] = RELEASE):
    return VATEXParser().load(root, files, SPLITS, collector)


def test_one_record_per_english_caption_in_either_published_layout(tmp_path):
    release = write_release(tmp_path / "vatex")
    records = load(release)
    assert {s: sum(r.split == s for r in records) for s in SPLITS} == {"train": 20, "val": 10, "test": 30}
    first = records[0]
    assert (first.video_id, first.path, first.duration) == (
        "Ptf_2VRj-V0_000122_000132",
        "Ptf_2VRj-V0_000122_000132.mp4",
        10.0,
    )
    assert first.descriptions == ["Caption 0 of clip Ptf_2VRj-V0_000122_000132."]
    assert first.events[0].intervals == ((0.0, 10.0),)
    assert [r.video_id for r in records if r.split == "test"][::10] == LISTS["test"]
    # CLIP2Video's one-file mapping {videoID: {enCap, chCap}} gives the same records
    mapping = {
        v: {k: e[k] for k in ("enCap", "chCap")} for v, e in ((v, entry(v)) for names in LISTS.values() for v in names)
    }
    (release / "vatex_data.json").write_text(json.dumps(mapping))
    assert load(release, files=("vatex_data.json",)) == records


def test_the_release_fixture_loads_alike_in_both_layouts_with_counts_worked_out_from_its_files():
    fixture = Path(__file__).parents[2] / "fixtures" / "vatex"  # tests/fixtures/vatex: the release's file names
    data = VATEXDataModule(str(fixture), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 4, "val": 2, "test": 3}
    records = load(fixture)
    assert load(fixture, files=("vatex_data.json",)) == records  # CLIP2Video's mapping of the same captions
    captions = {s: [r.descriptions[0] for r in records if r.split == s][-1] for s in SPLITS}
    assert captions == {
        "train": "Children play in the sand at a beach.",
        "val": "A person works dough with her hands.",
        "test": "A man throws a frisbee for his dog.",
    }
    assert records[1].descriptions == ["Someone strums a guitar in front of a crowd."]  # trailing space stripped


def test_data_module_hgr_splits(tmp_path):
    data = VATEXDataModule(str(write_release(tmp_path / "vatex")), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 20, "val": 10, "test": 30}


def test_missing_split_file_is_one_line_naming_it(tmp_path):
    release = write_release(tmp_path / "vatex")
    (release / "test_list.txt").unlink()
    with pytest.raises(AnnotationError, match=r"test_list.txt: annotation file not found$"):
        load(release)


@pytest.mark.parametrize(
    "captions, reason",
    [
        ("A man plays a guitar.", r"record '3c0hLqxvSSI_000000_000010': 'enCap' must be a non-empty list, got str"),
        ([], r"record '3c0hLqxvSSI_000000_000010': 'enCap' must be a non-empty list, got list"),
        (["ok", ["nested"]], r"record '3c0hLqxvSSI_000000_000010 caption 1': a caption must be a non-empty string"),
        (["ok", "  "], r"record '3c0hLqxvSSI_000000_000010 caption 1': a caption must be a non-empty string"),
    ],
)
def test_an_english_caption_list_of_the_wrong_type_is_a_bad_record(tmp_path, captions, reason):
    validation = [
        {**entry(v), **({"enCap": captions} if v == LISTS["val"][0] else {})} for v in LISTS["val"] + LISTS["test"]
    ]
    release = write_release(tmp_path / "vatex", validation=validation)
    with pytest.raises(AnnotationError, match=rf"vatex_validation_v1.0.json: {reason}"):
        load(release)
    collector = RecordCollector("skip")
    kept = load(release, collector)
    assert len(collector.dropped) == 1 and len(kept) == 50 and LISTS["val"][0] not in {r.video_id for r in kept}


def test_a_clip_listed_twice_or_captioned_twice_is_a_bad_record(tmp_path):
    release = write_release(tmp_path / "vatex", lists={**LISTS, "test": [*LISTS["test"], LISTS["test"][1]]})
    with pytest.raises(
        AnnotationError,
        match=r"test_list.txt: record 'CKUaeC_FWoA_000019_000029': listed again \(line 4, first on line 2\)",
    ):
        load(release)
    collector = RecordCollector("skip")
    assert len(load(release, collector)) == 60 and len(collector.dropped) == 1  # the first listing stays
    twice = [entry(v) for v in LISTS["val"] + LISTS["test"]] + [entry(LISTS["train"][0], count=3)]
    release = write_release(tmp_path / "again", validation=twice)
    again = r"record 'Ptf_2VRj-V0_000122_000132': captions given again \(first in .*vatex_training_v1.0.json\)"
    with pytest.raises(AnnotationError, match=rf"vatex_validation_v1.0.json: {again}"):
        load(release)
    collector = RecordCollector("skip")
    kept = load(release, collector)
    assert len(collector.dropped) == 1 and sum(r.video_id == LISTS["train"][0] for r in kept) == 10


def test_a_clip_in_two_split_files_is_refused(tmp_path):
    release = write_release(tmp_path / "vatex", lists={**LISTS, "val": [*LISTS["val"], LISTS["train"][0]]})
    with pytest.raises(AnnotationError, match=r"1 video\(s\) of split 'val' are also in the training split"):
        VATEXDataModule(str(release), num_frames=2, image_size=32).setup()


@pytest.mark.parametrize(
    "video_id", ["nM_ySHgMPW0_000010_000000", "nM_ySHgMPW0_000010_000010", "nM_ySHgMPW0_10_20", "nM_ySHgMPW0"]
)
def test_a_video_id_without_a_segment_of_positive_length_is_a_bad_record(tmp_path, video_id):
    validation = [entry(v) for v in LISTS["val"] + [video_id]]
    release = write_release(tmp_path / "vatex", lists={**LISTS, "test": [video_id]}, validation=validation)
    with pytest.raises(AnnotationError, match=rf"test_list.txt: record '{video_id}': videoID must be"):
        load(release)


def test_a_listed_clip_without_captions_and_a_caption_file_of_another_shape(tmp_path):
    release = write_release(tmp_path / "vatex", validation=[entry(v) for v in LISTS["test"]])
    with pytest.raises(
        AnnotationError, match=r"val_list.txt: record '3c0hLqxvSSI_000000_000010': listed, but no caption file"
    ):
        load(release)
    (release / RELEASE[1]).write_text(json.dumps([{"enCap": ["no id"]}]))
    with pytest.raises(
        AnnotationError, match=r"vatex_validation_v1.0.json: record 'entry #0': needs a non-empty string 'videoID'"
    ):
        load(release)
    (release / RELEASE[1]).write_text('"captions"')
    with pytest.raises(AnnotationError, match=r"vatex_validation_v1.0.json: expected a list of clips"):
        load(release)


def test_cli_test_ranks_ten_queries_per_clip_against_distinct_clips(tmp_path, tiny_clip):
    release = write_release(tmp_path / "vatex")
    (release / "videos").mkdir()
    for seed, video_id in enumerate(v for names in LISTS.values() for v in names):
        write_noise_video(release / "videos" / f"{video_id}.mp4", seconds=1.0, seed=seed)
    data = {
        "class_path": "lit_retrieval.data.datasets.vatex.VATEXDataModule",
        "init_args": {"annotation_dir": str(release), "num_frames": 2, "image_size": 32, "batch_size": 8},
    }
    scores, ids, metrics = cli_test(tmp_path, tiny_clip, data)
    assert scores.shape == (30, 3) and ids["video_ids"] == LISTS["test"]
    assert ids["targets"] == [t for t in range(3) for _ in range(10)]
    assert "t2v/R@1" in metrics and "v2t_group_max/R@1" in metrics


def test_the_shipped_config_resolves_to_clip4clips_recipe(capsys):
    data_module = "lit_retrieval.data.datasets.vatex.VATEXDataModule"
    assert shipped_recipe("vatex_clip4clip.yaml", capsys) == (data_module, CLIP4CLIP_RECIPE)
