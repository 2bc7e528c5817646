"""LSMDC's challenge split on fixtures in the release's layout: tab-separated `LSMDC16_*.csv` without a
header, clip ids carrying their timestamps, clips under `avi/{movie}/`."""

from pathlib import Path

import pytest

from lit_retrieval.data.bad_records import RecordCollector
from lit_retrieval.data.datasets.lsmdc import LSMDCDataModule, LSMDCParser, clip_span
from lit_retrieval.data.records import AnnotationError
from helpers.multi_caption import CLIP4CLIP_RECIPE, shipped_recipe

BEAUTY = "0001_American_Beauty_00.00.51.926-00.00.54.530"
BEAUTY_2 = "0001_American_Beauty_00.01.02.000-00.01.03.250"  # aligned 1.25 s: extracted 2 s
JUNO = "1004_Juno_00.00.32.849-00.00.35.458"
HARRY = "3001_21_JUMP_STREET_01.02.03.500-01.02.10.000"


def line(clip: str, sentence: str, extracted: tuple[str, str] | None = None) -> str:
    """A line as released: the clip id, aligned start/end (the name's), extracted start/end (the
    aligned ones unless given), the sentence."""
    aligned = clip.rsplit("_", 1)[1].split("-") if "-" in clip else ["", ""]
    return "\t".join([clip, *aligned, *(extracted or aligned), sentence])


def write(root: Path, name: str, lines: list[str]) -> Path:
    (root / name).write_text("\n".join(lines) + "\n")
    return root / name


@pytest.fixture
def release(tmp_path):
    write(
        tmp_path,
        "LSMDC16_annos_training.csv",
        [
            line(BEAUTY, "SOMEONE opens the door."),
            line(BEAUTY, "He looks around."),
            line(BEAUTY_2, "SOMEONE smiles.", extracted=("00.01.01.625", "00.01.03.625")),
        ],
    )
    write(tmp_path, "LSMDC16_annos_val.csv", [line(HARRY, "A car stops."), line(HARRY, "SOMEONE gets out.")])
    write(
        tmp_path,
        "LSMDC16_challenge_1000_publictect.csv",
        [line(JUNO, "SOMEONE drinks from a jug."), line(HARRY, "Cops run.")],
    )
    (tmp_path / "avi" / "1004_Juno").mkdir(parents=True)
    (tmp_path / "avi" / "1004_Juno" / f"{JUNO}.mp4").write_bytes(b"")  # found under its second extension
    return tmp_path


def test_clip_ids_give_movie_and_span():
    assert clip_span(BEAUTY, "f", "r") == ("0001_American_Beauty", pytest.approx(51.926), pytest.approx(54.530))
    movie, start, end = clip_span(HARRY, "f", "r")
    assert movie == "3001_21_JUMP_STREET" and (start, end) == (pytest.approx(3723.5), 3730.0)


def test_records_per_sentence_durations_from_the_clip_name(release):
    parser = LSMDCParser(release / "avi")
    train = parser.load(release / "LSMDC16_annos_training.csv", "train")
    # a training clip named on two lines is two training pairs with their own ids
    assert [r.video_id for r in train] == [BEAUTY, f"{BEAUTY}#1", BEAUTY_2]
    assert train[0].path == train[1].path == f"0001_American_Beauty/{BEAUTY}.avi"
    # the extracted span: the name's 2.604 s, and 2 s for the clip aligned 1.25 s long
    assert train[0].duration == pytest.approx(2.604) and train[2].duration == pytest.approx(2.0)
    assert [r.descriptions for r in train[:2]] == [["SOMEONE opens the door."], ["He looks around."]]
    # in val the clip is one gallery video with one query per sentence
    assert [r.video_id for r in parser.load(release / "LSMDC16_annos_val.csv", "val")] == [HARRY, HARRY]
    test = parser.load(release / "LSMDC16_challenge_1000_publictect.csv", "test")
    assert [(r.video_id, r.path) for r in test] == [
        (JUNO, f"1004_Juno/{JUNO}.mp4"),
        (HARRY, f"3001_21_JUMP_STREET/{HARRY}.avi"),
    ]
    flat = LSMDCParser(release, file_layout="flat").load(release / "LSMDC16_annos_val.csv", "val")
    assert flat[0].path == f"{HARRY}.avi"


def test_the_data_module_reads_train_and_the_public_test_file(release):
    data = LSMDCDataModule(str(release), num_frames=2, image_size=32, val_split="val")
    records = data.load_records(RecordCollector())
    assert [r.split for r in records] == ["train"] * 3 + ["test"] * 2
    with_val = LSMDCDataModule(str(release), {"train": "LSMDC16_annos_training.csv", "val": "LSMDC16_annos_val.csv"})
    assert [r.split for r in with_val.load_records(RecordCollector())][-2:] == ["val", "val"]


def test_the_release_fixture_loads_with_counts_and_spans_worked_out_from_its_files():
    fixture = Path(__file__).parents[2] / "fixtures" / "lsmdc"  # tests/fixtures/lsmdc: the challenge's file names
    files = {"train": "LSMDC16_annos_training.csv", "val": "LSMDC16_annos_val.csv"}
    files["test"] = "LSMDC16_challenge_1000_publictect.csv"
    data = LSMDCDataModule(str(fixture), files, num_frames=2, image_size=32, val_split="val")
    data.setup()
    assert {role: len(ds) for role, ds in data.datasets.items()} == {"train": 3, "val": 2, "test": 2}
    records = data.load_records(RecordCollector())
    last = {r.split: (r.video_id, round(r.duration, 3), r.descriptions[0]) for r in records}
    assert last == {
        "train": ("0001_American_Beauty_00.01.02.000-00.01.03.250", 2.0, "SOMEONE smiles."),  # aligned 1.25 s
        "val": ("1004_Juno_00.00.32.849-00.00.35.458", 2.609, "She wipes her mouth."),
        "test": ("1012_Unbreakable_00.10.12.100-00.10.15.600", 3.5, "SOMEONE sits on a bench."),
    }
    assert records[1].video_id == f"{BEAUTY}#1"  # the training clip's second line


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (line(JUNO, "Cops run."), "clip listed again \\(split 'test' has one sentence per clip\\)"),
        ("\t".join([HARRY, "1", "2", "Cops run."]), "expected 6 tab-separated fields, got 4"),
        (line("1004_Juno_00.00.32", "Cops run."), "clip id is not"),
        (line("1004_Juno_00.00.35.458-00.00.32.849", "Cops run."), "clip ends \\(00.00.32.849\\) at or before"),
        (line(HARRY, "Cops run.", ("01.02.03.5", "x")), "extracted clip times '01.02.03.5', 'x' are not HH.MM.SS.mmm"),
        (line(HARRY, " "), "empty sentence"),
    ],
)
def test_a_bad_test_line_names_file_line_and_clip_and_skip_drops_it(release, bad, reason):
    path = write(release, "test.csv", [line(JUNO, "SOMEONE drinks from a jug."), bad])
    clip = bad.split("\t")[0]
    with pytest.raises(AnnotationError, match=rf"{path}: record 'line 2 \({clip}\)': {reason}"):
        LSMDCParser(release).load(path, "test")
    collector = RecordCollector("skip")
    kept = LSMDCParser(release).load(path, "test", collector)
    assert [r.video_id for r in kept] == [JUNO] and len(collector.dropped) == 1


def test_a_missing_split_file_and_a_bad_layout_are_one_line_errors(release):
    data = LSMDCDataModule(str(release), {"train": "LSMDC16_annos_training.csv", "test": "missing.csv"})
    with pytest.raises(AnnotationError, match=r"missing\.csv: annotation file not found"):
        data.load_records(RecordCollector("skip"))
    with pytest.raises(Exception, match="data.file_layout must be 'movie' or 'flat', got 'x'"):
        LSMDCDataModule(str(release), file_layout="x")


def test_the_clip4clip_config_resolves_to_clip4clip_s_lsmdc_recipe(capsys):
    recipe = {**CLIP4CLIP_RECIPE}  # README, "LSMDC"
    assert shipped_recipe("lsmdc_clip4clip.yaml", capsys) == (
        "lit_retrieval.data.datasets.lsmdc.LSMDCDataModule",
        recipe,
    )
