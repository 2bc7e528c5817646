"""The one evaluation path (`RetrievalEvaluator`) against hand-worked metrics, a brute-force rank
loop and a score matrix computed with plain torch; skipped and undecodable test videos."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml

from lit_retrieval.cli import main
from lit_retrieval.data import MultiEventDataModule
from lit_retrieval.metrics.score_files import load_matrix, write_bank, write_scores
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import MeanPHead
from lit_retrieval.models.heads.base import SimilarityHead
from lit_retrieval.modules import DualEncoderRetrieval
from lit_retrieval.modules.evaluation import EvaluationConfig, NothingToEvaluateError, RetrievalEvaluator
from helpers.fit_configs import clip_fit_config
from helpers.media import write_noise_video
from helpers.evaluation_runs import eval_trainer

# 3 queries x 4 videos; query i describes video i, video 3 has no query.
HAND = torch.tensor([[0.9, 0.1, 0.5, 0.2], [0.8, 0.3, 0.7, 0.1], [0.2, 0.6, 0.6, 0.4]])


def dot(text, gallery):
    return text @ gallery.t()


def rank_hand_matrix(ties):
    evaluator = RetrievalEvaluator(EvaluationConfig(ties=ties, query_rows=2))
    # text = identity and gallery = HAND^T, so text @ gallery^T is HAND itself
    return evaluator.rank(
        dot, torch.eye(3), HAND.t().contiguous(), torch.arange(3), torch.arange(3), synced=False, keep_scores=True
    )


def test_metrics_of_a_hand_worked_matrix():
    ranked = rank_hand_matrix("optimistic")
    # t2v: q0 first; q1 below 0.8 and 0.7 -> 3; q2 ties 0.6 with video 1 -> 1 (optimistic)
    assert ranked.ranks.tolist() == [1.0, 3.0, 1.0]
    m = ranked.metrics
    assert (
        m["t2v/R@1"] == pytest.approx(200 / 3)
        and m["t2v/R@5"] == 100
        and m["t2v/MdR"] == 1
        and m["t2v/MnR"] == pytest.approx(5 / 3)
    )
    # v2t over the captioned videos 0-2: column 0 -> q0 first; column 1: q2's 0.6 beats 0.3 -> 2;
    # column 2: q1's 0.7 beats 0.6 -> 2
    assert m["v2t/R@1"] == pytest.approx(100 / 3) and m["v2t/MdR"] == 2 and m["v2t/MnR"] == pytest.approx(5 / 3)
    assert torch.equal(ranked.scores, HAND)
    pessimistic = rank_hand_matrix("pessimistic")
    assert pessimistic.ranks.tolist() == [1.0, 3.0, 2.0] and pessimistic.metrics["t2v/MnR"] == pytest.approx(2.0)


class OnePairPerBlock(SimilarityHead):
    """Cosine head that claims 1 MiB per pair, so a 1 MiB budget scores one pair per block."""

    def encode_text(self, text):
        return text

    def encode_video(self, video):
        return video

    def score(self, text_rep, video_rep):
        self.blocks.append((len(text_rep), len(video_rep)))
        return F.normalize(text_rep, dim=-1) @ F.normalize(video_rep, dim=-1).t()

    def pair_bytes(self, text_rep, video_rep):
        return 2**20


def brute_force_t2v_ranks(scores, targets):
    ranks = []
    for i, target in enumerate(targets):
        ranks.append(1 + sum(1 for value in scores[i] if value > scores[i][target]))
    return ranks


def test_block_scoring_equals_the_full_matrix_and_a_rank_loop():
    g = torch.Generator().manual_seed(0)
    text, gallery = torch.randn(7, 5, generator=g), torch.randn(11, 5, generator=g)
    targets = torch.tensor([3, 0, 10, 4, 4, 7, 1])
    head = OnePairPerBlock()
    head.blocks = []
    evaluator = RetrievalEvaluator(EvaluationConfig(query_rows=3, memory_mb=1))
    ranked = evaluator.rank(
        evaluator.head_score(head), text, gallery, targets, torch.arange(7), synced=False, keep_scores=True
    )
    full = (text / text.norm(dim=1, keepdim=True)) @ (gallery / gallery.norm(dim=1, keepdim=True)).t()
    torch.testing.assert_close(ranked.scores, full)
    assert set(head.blocks) == {(1, 1)} and len(head.blocks) == 7 * 11
    brute = brute_force_t2v_ranks(full.tolist(), targets.tolist())
    assert ranked.ranks.tolist() == brute
    assert ranked.metrics["t2v/R@1"] == pytest.approx(100 * sum(r <= 1 for r in brute) / 7)
    assert ranked.metrics["t2v/MnR"] == pytest.approx(sum(brute) / 7)


def test_saved_test_scores_equal_a_plain_torch_matrix(tmp_path, corpus, tiny_clip):
    torch.manual_seed(0)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)),
        MeanPHead(),
        evaluation=EvaluationConfig(save_scores=True, query_rows=3, memory_mb=1),
    )
    data = MultiEventDataModule(
        annotation=str(corpus / "annotations.json"), num_frames=3, image_size=32, batch_size=4, num_workers=0
    )
    eval_trainer(tmp_path).test(module, data, verbose=False)
    scores = np.load(tmp_path / "scores.npy")
    ids = json.loads((tmp_path / "scores_ids.json").read_text())
    annotation = json.loads((corpus / "annotations.json").read_text())
    test_videos = [v for v in annotation["videos"] if v["split"] == "test"]
    assert scores.dtype == np.float32 and scores.shape == (len(test_videos), len(test_videos))
    assert ids["video_ids"] == [v["video_id"] for v in test_videos] and ids["text_ids"] == ids["video_ids"]
    assert ids["targets"] == list(range(len(test_videos)))
    # per query: its events, and its tokens under the tiny CLIP's character tokenizer counted by hand
    # (one per non-space character of the joined query, plus start and end)
    events = [[e["description"].strip() for e in v["events"]] for v in test_videos]
    assert ids["num_events"] == [len(e) for e in events]
    assert ids["query_tokens"] == [sum(not c.isspace() for c in " ".join(e)) + 2 for e in events]
    # meanP by hand (CLIP4Clip): cosine of the query's pooled feature and the mean of the L2-normalised frames
    module.eval()
    with torch.no_grad():
        texts, videos = [], []
        for batch in data.test_dataloader():
            texts.append(module.encoder.encode_text([" ".join(e) for e in batch["events"]]).pooled)
            frames = module.encoder.encode_video(batch["frames"], batch["frame_mask"]).frames
            frames = frames / frames.norm(dim=-1, keepdim=True)
            mask = batch["frame_mask"].unsqueeze(-1).float()
            videos.append((frames * mask).sum(1) / mask.sum(1))
    text, video = torch.cat(texts), torch.cat(videos)
    full = (text / text.norm(dim=1, keepdim=True)) @ (video / video.norm(dim=1, keepdim=True)).t()
    np.testing.assert_allclose(scores, full.numpy(), atol=1e-5)
    ranks = brute_force_t2v_ranks(full.tolist(), list(range(len(test_videos))))
    metrics = json.loads((tmp_path / "metrics.json").read_text())["test"]
    assert metrics["t2v/R@1"] == pytest.approx(100 * sum(r <= 1 for r in ranks) / len(ranks))
    assert metrics["t2v/MnR"] == pytest.approx(sum(ranks) / len(ranks)) and "skipped_videos" not in metrics


def test_the_score_files_written_are_the_ones_read(tmp_path):
    """The writer of lit_retrieval/metrics/score_files.py against its reader: 3 texts (two captions
    of video b) over 2 videos, with relational flags; without flags no threshold is written."""
    scores = torch.tensor([[0.5, 0.1], [0.2, 0.9], [0.3, 0.7]], dtype=torch.float64)
    flags = {"relational": [True, False, True], "num_shots": [4, 2, 2], "min_shots": 3}
    write_scores(tmp_path, scores, ["a", "b"], [0, 1, 1], num_events=[2, 1, 3], **flags)
    write_bank(tmp_path, torch.ones(4, 2, dtype=torch.float64))
    matrix, ids = load_matrix(tmp_path / "scores.npy")
    assert matrix.dtype == np.float32 and np.array_equal(matrix, scores.float().numpy())
    assert ids == {
        "text_ids": ["a", "b", "b"],
        "video_ids": ["a", "b"],
        "targets": [0, 1, 1],
        **flags,
        "num_events": [2, 1, 3],
        "query_tokens": None,
    }
    bank = np.load(tmp_path / "scores_bank.npy")
    assert bank.dtype == np.float32 and bank.shape == (4, 2)
    write_scores(tmp_path, scores, ["a", "b"], [0, 1, 1], num_events=[2, 1, 3], query_tokens=[5, 3, 9], min_shots=3)
    _, ids = load_matrix(tmp_path / "scores.npy")
    assert ids["relational"] is None and ids["min_shots"] is None and ids["query_tokens"] == [5, 3, 9]


def noise_corpus(root: Path, num_test: int, corrupt: int) -> Path:
    """Two training videos and `num_test` test videos, real mp4 files (PyAV noise); the last
    `corrupt` test videos are overwritten with bytes no decoder reads."""
    (root / "videos").mkdir(parents=True)
    videos = []
    for i in range(num_test + 2):
        path = write_noise_video(root / "videos" / f"v{i}.mp4", seconds=2.0, seed=i)
        if num_test - corrupt <= i < num_test:
            path.write_bytes(b"\x00" * 2000)
        events = [
            {"description": f"noise clip number {i} part {k}", "start": k * 1.0, "end": k + 1.0} for k in range(2)
        ]
        split = "test" if i < num_test else "train"
        videos.append(
            {"video_id": f"v{i}", "path": f"videos/v{i}.mp4", "duration": 2.0, "split": split, "events": events}
        )
    (root / "annotations.json").write_text(
        json.dumps({"format": "lit-retrieval/multi-event", "version": 1, "videos": videos})
    )
    return root / "annotations.json"


def skip_data(annotation):
    return MultiEventDataModule(
        annotation=str(annotation), num_frames=2, image_size=32, batch_size=2, num_workers=0, on_bad_video="skip"
    )


def test_skipped_test_videos_are_counted_in_metrics_and_table(tmp_path, tiny_clip, capsys):
    annotation = noise_corpus(tmp_path / "data", num_test=5, corrupt=1)
    module = DualEncoderRetrieval(
        CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead(), evaluation=EvaluationConfig(save_scores=True)
    )
    eval_trainer(tmp_path / "run").test(module, skip_data(annotation), verbose=False)
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())["test"]
    assert metrics["skipped_videos"] == 1
    assert np.load(tmp_path / "run" / "scores.npy").shape == (4, 4)
    assert json.loads((tmp_path / "run" / "scores_ids.json").read_text())["video_ids"] == ["v0", "v1", "v2", "v3"]
    assert "1 video skipped as undecodable" in capsys.readouterr().out


def test_an_evaluation_with_nothing_to_evaluate_fails_clearly(tmp_path, tiny_clip, corpus, capsys):
    annotation = noise_corpus(tmp_path / "data", num_test=3, corrupt=3)
    module = DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), MeanPHead())
    with pytest.raises(
        NothingToEvaluateError, match="test split: nothing could be evaluated: all 3 videos were skipped as undecodable"
    ):
        eval_trainer(tmp_path / "run").test(module, skip_data(annotation), verbose=False)
    # the command line: one line on stderr, exit status 2, no metrics written
    trainer = {"logger": False, "enable_progress_bar": False, "default_root_dir": str(tmp_path / "cli")}
    config = clip_fit_config(
        tiny_clip, corpus, trainer, data={"annotation": str(annotation), "on_bad_video": "skip", "num_workers": 0}
    )
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["test", "--config", str(tmp_path / "config.yaml")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-retrieval")]
    assert exit_info.value.code == 2 and lines == [
        "lit-retrieval test: test split: nothing could be evaluated: "
        "all 3 videos were skipped as undecodable (data.on_bad_video: skip)"
    ]
    assert not list((tmp_path / "cli").rglob("metrics.json"))
