"""MSVD in CLIP4Clip's release layout: `raw-captions.pkl` (clip name -> token-list captions) and
`{train,val,test}_list.txt` (clip names of the real lists, no newline after the last), `.avi` clips."""

import os
import pickle
from collections import OrderedDict
from pathlib import Path

import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.msvd import MSVDDataModule, MSVDParser
from lit_retrieval.data.records import AnnotationError
from helpers.media import write_noise_video
from helpers.multi_caption import CLIP4CLIP_RECIPE, cli_test, shipped_recipe

SPLITS = {"train": "train_list.txt", "val": "val_list.txt", "test": "test_list.txt"}
LISTS = {
    "train": ["-4wsuPCjDBc_5_15", "-7KMZQEsJW4_205_208"],
    "val": ["cSDkshD2ME0_11_14", "cSDkshD2ME0_12_15"],  # two overlapping clips of one source video
    "test": ["eyhzdC936uk_15_27", "fIaLVw_Gc_w_99_109", "qOiN__I1-Zo_2_8"],  # `_` inside YouTube ids
}
CAPTIONS = {  # token lists, as in the release; test clips have 4, 2 and 3 captions
    "-4wsuPCjDBc_5_15": [["a", "squirrel", "is", "eating", "a", "peanut"], ["a", "chipmunk", "eats"]],
    "-7KMZQEsJW4_205_208": [["a", "man", "slices", "bread"]],
    "cSDkshD2ME0_11_14": [["a", "dog", "runs"]],
    "cSDkshD2ME0_12_15": [["a", "dog", "jumps"], ["the", "dog", "leaps"]],
    "eyhzdC936uk_15_27": [["a", "woman", "rides", "a", "horse"], ["someone", "rides"], ["a", "horse"], ["riding"]],
    "fIaLVw_Gc_w_99_109": [["a", "cat", "plays", "piano"], ["a", "cat", "plays"]],
    "qOiN__I1-Zo_2_8": [["a", "boy", "swims"], ["a", "child", "swims", "in", "a", "pool"], ["swimming"]],
    "zzzNotListed_1_2": [["never", "used"]],
}


def write_release(root: Path, captions: dict = CAPTIONS, lists: dict = LISTS) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "raw-captions.pkl").write_bytes(pickle.dumps(captions))
    for split, names in lists.items():
        (root / SPLITS[split]).write_text("\n".join(names))
    return root


@pytest.fixture
def release(tmp_path):
    return write_release(tmp_path / "msvd")


def test_one_record_per_caption_sharing_the_clip_id_file_and_duration(release):
    assert MSVDParser().load(release, "raw-captions.pkl", SPLITS) == MSVDParser().load(
        write_release(release.parent / "ordered", OrderedDict(CAPTIONS)), "raw-captions.pkl", SPLITS
    )  # an OrderedDict pickle reads alike
    (release / "MSVD_Videos").mkdir()
    (release / "MSVD_Videos" / "qOiN__I1-Zo_2_8.mp4").write_bytes(b"")  # re-encoded: the .mp4 is used
    records = MSVDParser(release / "MSVD_Videos").load(release, "raw-captions.pkl", SPLITS)
    assert [(r.split, r.video_id) for r in records].count(("test", "eyhzdC936uk_15_27")) == 4
    assert {s: sum(r.split == s for r in records) for s in SPLITS} == {"train": 3, "val": 3, "test": 9}
    first = records[0]
    assert (first.video_id, first.path, first.duration) == ("-4wsuPCjDBc_5_15", "-4wsuPCjDBc_5_15.avi", 10.0)
    assert first.descriptions == ["a squirrel is eating a peanut"]  # tokens joined with spaces
    assert first.events[0].intervals == ((0.0, 10.0),)
    swim = [r for r in records if r.video_id == "qOiN__I1-Zo_2_8"]
    assert {r.path for r in swim} == {"qOiN__I1-Zo_2_8.mp4"} and {r.duration for r in swim} == {6.0}
    assert [r.descriptions[0] for r in swim] == ["a boy swims", "a child swims in a pool", "swimming"]
    assert "zzzNotListed_1_2" not in {r.video_id for r in records}


def test_data_module_splits_and_clip4clip_val(release):
    data = MSVDDataModule(str(release), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 3, "val": 3, "test": 9}
    assert data.default_video_root() == release / "MSVD_Videos"


def test_the_release_fixture_loads_with_the_counts_worked_out_from_its_files():
    fixture = Path(__file__).parents[2] / "fixtures" / "msvd"  # tests/fixtures/msvd: the release's file names
    data = MSVDDataModule(str(fixture), num_frames=2, image_size=32)
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 3, "val": 2, "test": 4}
    records = MSVDParser().load(fixture, "raw-captions.pkl", SPLITS)
    first = {split: next(r for r in records if r.split == split) for split in SPLITS}
    assert {s: (r.video_id, r.duration, r.descriptions) for s, r in first.items()} == {
        "train": ("-4wsuPCjDBc_5_15", 10.0, ["a squirrel is eating a peanut"]),
        "val": ("cSDkshD2ME0_11_14", 3.0, ["a dog runs"]),
        "test": ("qOiN__I1-Zo_2_8", 6.0, ["a boy swims"]),  # `_` inside the YouTube id, tokens joined
    }


def test_missing_split_file_is_one_line_naming_it(release):
    (release / "val_list.txt").unlink()
    with pytest.raises(AnnotationError, match=r"val_list.txt: annotation file not found$"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)


@pytest.mark.parametrize(
    "value, reason",
    [
        ("a dog runs", "the caption list must be a non-empty list, got str"),
        ([], "the caption list must be a non-empty list, got list"),
        ([["a", "dog"], 7], "record 'cSDkshD2ME0_11_14 caption 1': a caption must be a list of word strings"),
        ([["a", 3]], "record 'cSDkshD2ME0_11_14 caption 0': a caption must be a list of word strings"),
    ],
)
def test_a_caption_list_of_the_wrong_type_is_a_bad_record(tmp_path, value, reason):
    release = write_release(tmp_path / "msvd", {**CAPTIONS, "cSDkshD2ME0_11_14": value})
    with pytest.raises(AnnotationError, match=rf"raw-captions.pkl: .*{reason}"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)
    collector = RecordCollector("skip")
    kept = MSVDParser().load(release, "raw-captions.pkl", SPLITS, collector)
    assert len(collector.dropped) == 1 and len(kept) == 14  # that clip's one caption only is lost
    assert "cSDkshD2ME0_11_14" not in {r.video_id for r in kept}


def test_a_clip_listed_twice_names_the_file_and_both_lines(tmp_path):
    lists = {**LISTS, "test": [*LISTS["test"], "", "fIaLVw_Gc_w_99_109"]}
    release = write_release(tmp_path / "msvd", lists=lists)
    message = r"test_list.txt: record 'fIaLVw_Gc_w_99_109': listed again \(line 5, first on line 2\)"
    with pytest.raises(AnnotationError, match=message):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)
    collector = RecordCollector("skip")
    kept = MSVDParser().load(release, "raw-captions.pkl", SPLITS, collector)
    assert len(collector.dropped) == 1 and sum(r.video_id == "fIaLVw_Gc_w_99_109" for r in kept) == 2


def test_a_clip_in_two_split_files_is_refused(tmp_path):
    release = write_release(tmp_path / "msvd", lists={**LISTS, "train": [*LISTS["train"], "qOiN__I1-Zo_2_8"]})
    with pytest.raises(AnnotationError, match=r"1 video\(s\) of split 'test' are also in the training split"):
        MSVDDataModule(str(release), num_frames=2, image_size=32).setup()


@pytest.mark.parametrize("name", ["eyhzdC936uk_27_15", "eyhzdC936uk_15_15", "eyhzdC936uk", "eyhzdC936uk_15_2x"])
def test_a_clip_name_without_a_segment_of_positive_length_is_a_bad_record(tmp_path, name):
    release = write_release(tmp_path / "msvd", {**CAPTIONS, name: [["x"]]}, {**LISTS, "test": [name]})
    with pytest.raises(AnnotationError, match=rf"test_list.txt: record '{name}': clip name must be"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)


def test_listed_clip_without_captions_and_a_pickle_of_other_objects(tmp_path):
    captions = {k: v for k, v in CAPTIONS.items() if k != "-7KMZQEsJW4_205_208"}
    release = write_release(tmp_path / "msvd", captions)
    with pytest.raises(AnnotationError, match=r"raw-captions.pkl: record '-7KMZQEsJW4_205_208': no captions"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)

    class Payload:  # what a hostile pickle does: call a function while loading
        def __reduce__(self):
            return os.makedirs, (str(tmp_path / "created"),)

    (release / "raw-captions.pkl").write_bytes(pickle.dumps({"-4wsuPCjDBc_5_15": Payload()}))
    with pytest.raises(AnnotationError, match=r"raw-captions.pkl: not a pickle of plain Python objects .*os"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)
    assert not (tmp_path / "created").exists()
    (release / "raw-captions.pkl").write_bytes(pickle.dumps([["a"]]))
    with pytest.raises(AnnotationError, match=r"raw-captions.pkl: expected a dict of clip name -> captions, got list"):
        MSVDParser().load(release, "raw-captions.pkl", SPLITS)


def test_cli_test_ranks_one_query_per_caption_against_distinct_clips(tmp_path, tiny_clip):
    release = write_release(tmp_path / "msvd")
    videos = release / "MSVD_Videos"
    videos.mkdir()
    for seed, name in enumerate(n for names in LISTS.values() for n in names):
        write_noise_video(videos / f"{name}.avi", seconds=1.0, seed=seed)  # MPEG-4 in AVI, as released
    data = {
        "class_path": "lit_retrieval.data.datasets.msvd.MSVDDataModule",
        "init_args": {"annotation_dir": str(release), "num_frames": 2, "image_size": 32, "batch_size": 4},
    }
    scores, ids, metrics = cli_test(tmp_path, tiny_clip, data)
    assert scores.shape == (9, 3)  # 4 + 2 + 3 captions, 3 clips
    assert ids["video_ids"] == LISTS["test"]
    assert ids["targets"] == [0, 0, 0, 0, 1, 1, 2, 2, 2]
    assert "t2v/R@1" in metrics and "v2t_group_max/R@1" in metrics


def test_the_shipped_config_resolves_to_clip4clips_recipe(capsys):
    data_module = "lit_retrieval.data.datasets.msvd.MSVDDataModule"
    assert shipped_recipe("msvd_clip4clip.yaml", capsys) == (data_module, CLIP4CLIP_RECIPE)


def test_cli_reports_a_missing_split_file_in_one_line_exit_2(tmp_path, tiny_clip, capsys):
    release = write_release(tmp_path / "msvd")
    (release / "test_list.txt").unlink()
    data = {
        "class_path": "lit_retrieval.data.datasets.msvd.MSVDDataModule",
        "init_args": {"annotation_dir": str(release)},
    }
    with pytest.raises(SystemExit) as exit_info:
        cli_test(tmp_path, tiny_clip, data)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-retrieval")]
    assert exit_info.value.code == 2
    assert lines == [f"lit-retrieval test: {release / 'test_list.txt'}: annotation file not found"]
