"""`lit-retrieval sali-stats`: SALI Tab. 1's statistics (relational share, shots per video,
Rel-Multi) of an annotation + shot cache, checked against counts made by hand."""

import json
from pathlib import Path

import pytest
import yaml

from helpers.fit_configs import clip_fit_config
from lit_retrieval.cli import main
from lit_retrieval.commands import run_command
from lit_retrieval.metrics.sali_statistics import PAPER_SHARES
from lit_retrieval.data.media.shots import ShotCache, ShotDetectorConfig
from helpers.media import write_noise_video

# (split, query, shot count); relational = an interpersonal verb and two person mentions (SALI Sec. 2)
VIDEOS = [
    ("test", "The man confronts the woman.", 40),  # relational: man, woman
    ("test", "A woman talks to him in the kitchen.", 10),  # relational: woman, him
    ("test", "A dog runs across the yard.", 50),  # no verb
    ("test", "A girl looks at the sea. The waves roll in.", 36),  # one person only
    ("train", "He hugs her.", 3),  # relational: he, her
    ("train", "A car drives by.", 5),
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("stats")
    (root / "videos").mkdir()
    records = []
    cache = ShotCache(root / "shots")
    for i, (split, query, shots) in enumerate(VIDEOS):
        path = write_noise_video(root / "videos" / f"v{i}.mp4", seconds=1.0, seed=i)
        cache.put(path, ShotDetectorConfig(), [(k / shots, (k + 1) / shots) for k in range(shots)])
        event = {"description": query, "start": 0.0, "end": 1.0}
        records.append(
            {"video_id": f"v{i}", "path": f"videos/v{i}.mp4", "duration": 1.0, "split": split, "events": [event]}
        )
    (root / "annotations.json").write_text(
        json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": records})
    )
    return root


def write_config(corpus, tiny_clip, path, model=None, shots=True):
    data = {"shots": {"cache_dir": str(corpus / "shots"), "progress": False}} if shots else {}
    config = clip_fit_config(tiny_clip, corpus, {"logger": False}, model=model, data=data)
    path.write_text(yaml.safe_dump(config))
    return str(path)


def stats(capsys, *argv):
    assert run_command("sali-stats", [*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_statistics_equal_the_hand_counts(corpus, tiny_clip, tmp_path, capsys):
    config = write_config(corpus, tiny_clip, tmp_path / "c.yaml")
    out = stats(capsys, config)[config]
    # test: shots 40, 10, 50, 36 -> median (36 + 40) / 2 = 38, mean 34; 2 of 4 relational; Rel-Multi
    # at the median: only "The man confronts the woman." (40 >= 38)
    assert out["test"] == {
        "videos": 4,
        "queries": 4,
        "median_shots": 38.0,
        "mean_shots": 34.0,
        "relational": 2,
        "relational_%": 50.0,
        "min_shots": 38.0,
        "rel_multi": 1,
    }
    # train: shots 3, 5 -> median 4; "He hugs her." is relational but has 3 shots
    assert out["train"]["median_shots"] == 4.0 and out["train"]["relational"] == 1 and out["train"]["rel_multi"] == 0
    # the config's Rel-Multi threshold (evaluation.relational.min_shots) replaces the median
    fixed = write_config(
        corpus, tiny_clip, tmp_path / "fixed.yaml", model={"evaluation": {"relational": {"min_shots": 5}}}
    )
    assert stats(capsys, fixed, "--splits", "test")[fixed]["test"] == {**out["test"], "min_shots": 5.0, "rel_multi": 2}
    # the config's relational rule: "dog" as a person word does not make "A dog runs" relational (no verb)
    # but "the sea" as one makes "A girl looks at the sea" relational
    spans = write_config(corpus, tiny_clip, tmp_path / "spans.yaml", model={"spans": {"extra_person_words": ["sea"]}})
    assert stats(capsys, spans, "--splits", "test")[spans]["test"]["relational"] == 3


def test_table_and_a_config_without_shots(corpus, tiny_clip, tmp_path, capsys):
    config = write_config(corpus, tiny_clip, tmp_path / "c.yaml")
    assert run_command("sali-stats", [config, "--splits", "test"]) == 0
    table = capsys.readouterr().out
    assert "SALI Tab. 1 statistics" in table and "test" in table and "38" in table
    bare = write_config(corpus, tiny_clip, tmp_path / "bare.yaml", shots=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["sali-stats", bare])
    err = capsys.readouterr().err
    assert (
        exit_info.value.code == 2
        and err.strip()
        == f"lit-retrieval sali-stats: {bare}: no data.shots section: the statistics need each video's shots"
    )


CAPTIONS = Path(__file__).parents[1] / "fixtures" / "sali_captions"
CM_CAPTIONS = str(CAPTIONS / "condensed_movies" / "descriptions.csv")
MSRVTT_CAPTIONS = str(CAPTIONS / "msrvtt" / "MSRVTT_JSFUSION_test.csv")


def test_caption_files_equal_the_hand_labels(capsys):
    """The release files' layout (CM `descriptions.csv`: imdbid,videoid,description, quoted fields, a
    clip described twice, an empty description; MSR-VTT 1k-A: key,vid_key,video_id,sentence), each
    caption labelled by hand from the rule's definition (lit_retrieval/data/text/spans.py), and the
    paper's figure beside ours."""
    out = stats(capsys, "--captions", CM_CAPTIONS, MSRVTT_CAPTIONS)
    # CM, 11 rows: Marty's second description and the empty one are dropped -> 9 queries. Relational:
    # Rick confronts Ilsa, Forrest tells Jenny, Marty talks to Doc, Rocky fights Apollo, Rose kisses
    # Jack, Bond asks Vesper. Not: the shark (no person), Rachael talks to herself (a reflexive is the
    # same person), Sarah threatens Dr. Silberman (threatens is not among the 11).
    assert out[CM_CAPTIONS] == {
        "captions": {
            "rows": 11,
            "queries": 9,
            "relational": 6,
            "relational_%": 600 / 9,
            "paper": PAPER_SHARES["description"],
        }
    }
    # MSR-VTT, 8 rows: a man and a woman talking; two men + each other; a woman speaking to a man.
    # Not: a woman talking about a product, a man talking about his car (his: a possessive), a girl
    # singing, she + herself, people walking (no verb).
    assert out[MSRVTT_CAPTIONS] == {
        "captions": {"rows": 8, "queries": 8, "relational": 3, "relational_%": 37.5, "paper": PAPER_SHARES["sentence"]}
    }
    assert run_command("sali-stats", ["--captions", MSRVTT_CAPTIONS]) == 0
    assert "61 of MSR-VTT 1k-A" in capsys.readouterr().out


def test_caption_rule_from_a_config_and_bad_caption_files(corpus, tiny_clip, tmp_path, capsys):
    # the config's rule: with "herself" as a person word, Rachael and "she talks to herself" count
    rule = write_config(corpus, tiny_clip, tmp_path / "rule.yaml", model={"spans": {"extra_person_words": ["herself"]}})
    out = stats(capsys, "--captions", CM_CAPTIONS, MSRVTT_CAPTIONS, "--rule", rule)
    assert out[CM_CAPTIONS]["captions"]["relational"] == 7 and out[MSRVTT_CAPTIONS]["captions"]["relational"] == 4
    # a semicolon-separated copy (one column) and a file of another kind are refused in one line, exit 2
    semicolons = tmp_path / "semicolons.csv"
    semicolons.write_text(Path(MSRVTT_CAPTIONS).read_text().replace(",", ";"))
    for bad in (
        str(semicolons),
        str(Path(__file__).parents[1] / "fixtures" / "condensed_movies" / "metadata" / "clips.csv"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(["sali-stats", "--captions", bad])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and len(err.splitlines()) == 1
        assert err.startswith(f"lit-retrieval sali-stats: {bad}: not a caption file: needs data rows with the columns")
