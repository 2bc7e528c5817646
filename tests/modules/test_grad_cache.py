"""Gradient caching (`lit_retrieval/modules/grad_cache.py`) against the plain full-batch step computed
here without caching: the loss and every parameter's gradient, for the dual encoder with MEA (every
head it accepts, both query modes, MeVTR's event loss), for GVE with hard negatives (LoRA, mixed
text / image / video rows, nested gradient checkpointing), and on 2 gloo ranks with cross-device
negatives (the dual encoder with MEA, GVE with hard negatives); dropout draws the same masks in both
passes; UATVR is refused.

Tolerance (fp32): losses to 1e-6 relative; each parameter's gradient to 5e-5 of its largest
entry (+1e-6 for gradients that are zero in exact arithmetic, e.g. attention key biases). The
towers batch their matrix products differently per chunk, which changes float rounding only
(observed: MeanP 1e-6 of the largest entry, e.g. 5e-5 on a token-embedding gradient of 57;
UCoFiA, whose top-k and Sinkhorn steps amplify it, 2.3e-5).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import yaml
import torch.distributed as dist
from PIL import Image

from lit_retrieval.data.items import MediaItem
from lit_retrieval.data.text.queries import PartialBatch
from lit_retrieval.losses.mevtr import MeVTRLoss
from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.gve import AdapterConfig
from lit_retrieval.models.heads import (
    MeanPHead,
    SALIHead,
    MeVTRHead,
    PAUHead,
    SeqLSTMHead,
    SeqTransfHead,
    TempMeHead,
    TightTransfHead,
    TS2NetHead,
    UCoFiAHead,
    XCLIPHead,
)
from lit_retrieval.modules import DualEncoderRetrieval, EmbedderConfig, GVERetrieval, MEAConfig, SALIRetrieval
from lit_retrieval.modules import grad_cache as grad_cache_module
from lit_retrieval.modules.grad_cache import GradCacheConfig
from helpers.media import write_noise_video
from helpers.gve_embedder import SMALL
from helpers.forked_ranks import run_ranks

GRAD_REL, GRAD_ABS, LOSS_REL = 5e-5, 1e-6, 1e-6


def assert_close_gradient(got: torch.Tensor, want: torch.Tensor, name: str, rel: float = GRAD_REL) -> None:
    """`got` within `rel` of `want`'s largest entry (plus `GRAD_ABS`) everywhere."""
    error, scale = float((got - want).abs().max()), float(want.abs().max())
    assert error <= rel * scale + GRAD_ABS, f"{name}: off by {error:.3g}, largest entry {scale:.3g}"


def video_batch(rows: list[int]) -> dict:
    """Videos of 3, 2 and 1 valid frames and queries of 1-3 events of different lengths (chunks
    tokenise to different lengths, so their word tokens are padded when concatenated)."""
    g = torch.Generator().manual_seed(5)
    frames = torch.randn(8, 3, 3, 32, 32, generator=g)
    mask = torch.tensor([[True, True, True], [True, True, False], [True, False, False]] * 3)[:8]
    events = [[f"shape {i} moves" + " far" * i, f"then it turns {i}", f"and stops {i}"][: 1 + i % 3] for i in range(8)]
    events = [e if len(e) > 1 else e + ["it waits"] for e in events]
    return {
        "frames": frames[rows],
        "frame_mask": mask[rows],
        "events": [events[i] for i in rows],
        "video_id": [f"v{i}" for i in rows],
        "skipped": [],
    }


def dual_module(tiny_clip, head=MeanPHead, grad_cache=None, **kwargs) -> DualEncoderRetrieval:
    torch.manual_seed(0)
    if "event_loss" not in kwargs:
        kwargs["mea"] = MEAConfig(weight=0.5, num_partial=2)
    return DualEncoderRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), head(), grad_cache=grad_cache, **kwargs)


def step(module, batch: dict) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """One training step's logged values and every parameter's gradient."""
    torch.manual_seed(1)
    out = module.training_step(batch, 0)
    out["loss"].backward()
    values = {k: v.item() for k, v in out.items() if k != "loss" and v.ndim == 0}
    return values, {n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None}


def assert_same_step(got, want) -> None:
    (got_values, got_grads), (want_values, want_grads) = got, want
    assert got_values.keys() == want_values.keys()
    for key, value in want_values.items():
        assert got_values[key] == pytest.approx(value, rel=LOSS_REL, abs=1e-7), key
    assert got_grads.keys() == want_grads.keys()
    assert len(want_grads) > 10
    for name, grad in want_grads.items():
        assert_close_gradient(got_grads[name], grad, name)


@pytest.mark.parametrize("query_mode", ["concat", "events"])
def test_dual_encoder_with_mea_gives_the_full_batch_loss_and_gradients_at_every_chunk_size(tiny_clip, query_mode):
    batch = video_batch(list(range(6)))
    want = step(dual_module(tiny_clip, query_mode=query_mode), batch)
    assert want[0]["mea_theta"] != 0  # the MEA term takes part
    chunks = [(1, 1), (2, 2), (None, None), (3, 4)] if query_mode == "concat" else [(2, 4)]
    for text_chunk, video_chunk in chunks:
        cache = GradCacheConfig(text_chunk, video_chunk)
        assert_same_step(step(dual_module(tiny_clip, grad_cache=cache, query_mode=query_mode), batch), want)


HEADS = {
    "seqLSTM": SeqLSTMHead,
    "seqTransf": SeqTransfHead,
    "tempme": lambda: TempMeHead(num_frames=3, merge_layers=[1], merge_frames=[3]),
    "xclip": XCLIPHead,
    "tightTransf": TightTransfHead,
    "ts2net": TS2NetHead,
    "ucofia": UCoFiAHead,
    "pau": PAUHead,
}


# Their training patch selection draws noise for the rows of each call (`PerturbedTopK`), so a chunked
# step draws other noise (the same distribution): the reference is the same chunking without caching.
PER_CALL_NOISE = {"ts2net", "ucofia"}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_every_accepted_head_trains_exactly_under_gradient_caching(tiny_clip, name, monkeypatch):
    batch, cache = video_batch(list(range(5))), GradCacheConfig(2, 2)
    got = step(dual_module(tiny_clip, HEADS[name], cache), batch)
    if name in PER_CALL_NOISE:
        monkeypatch.setattr(grad_cache_module, "checkpoint", plain_checkpoint)
        want = step(dual_module(tiny_clip, HEADS[name], cache), batch)
    else:
        want = step(dual_module(tiny_clip, HEADS[name]), batch)
    assert_same_step(got, want)


def test_mevtr_event_captions_are_cached_as_text_rows(tiny_clip):
    batch = video_batch(list(range(5)))
    want = step(dual_module(tiny_clip, MeVTRHead, event_loss=MeVTRLoss()), batch)
    got = step(dual_module(tiny_clip, MeVTRHead, GradCacheConfig(3, 2), event_loss=MeVTRLoss()), batch)
    assert_same_step(got, want)


def test_sali_with_shots_and_relational_queries_trains_exactly(tiny_clip):
    """SALIRetrieval: whole queries and their subject/object spans per text chunk, frames with their
    shot indices per video chunk (different shot counts per chunk, padded when concatenated).
    In float64: the Sinkhorn iterations amplify fp32 rounding in the gradient of the learned
    temperature `head.log_eps` to 1e-3 of its size (measured), while in float64 the chunked and full
    steps agree to 1e-15, so the fp64 comparison keeps the tight tolerance and tests exactness."""

    def sali(grad_cache=None):
        torch.manual_seed(0)
        head = SALIHead(train_operator="ot", train_penalty=True)
        return SALIRetrieval(CLIPEncoder(pretrained=str(tiny_clip)), head, grad_cache=grad_cache).double()

    batch = video_batch(list(range(5)))
    batch["frames"] = batch["frames"].double()
    batch["events"][0] = ["The red circle confronts the blue square.", "A dot rests."]
    batch["events"][3] = ["A man hands the woman a box.", "She waves."]
    batch["frame_shots"] = torch.tensor([[0, 1, 2], [0, 0, -1], [0, -1, -1], [0, 0, 1], [0, 1, -1]])
    assert_same_step(step(sali(GradCacheConfig(2, 2)), batch), step(sali(), batch))


def test_uatvr_is_refused_in_one_line_with_exit_status_2(tiny_clip, tmp_path, capsys, monkeypatch):
    """Through `lit-retrieval fit` (the CLI error contract): one line naming the option, exit 2."""
    from helpers.fit_configs import clip_fit_config

    from lit_retrieval.cli import main

    config = clip_fit_config(tiny_clip, tmp_path, {}, model={"grad_cache": {"text_chunk": 2, "video_chunk": 2}})
    config["model"]["init_args"]["head"] = {"class_path": "lit_retrieval.models.heads.UATVRHead"}
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.delenv("LIT_RETRIEVAL_DEBUG", raising=False)
    with pytest.raises(SystemExit) as finished:
        main(["fit", "--config", str(tmp_path / "fit.yaml")])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("lit-retrieval fit:")]
    assert finished.value.code == 2
    assert len(lines) == 1 and "model.grad_cache cannot train UATVRHead: " in lines[0]
    assert lines[0].endswith("depend on the other texts of a chunk; drop grad_cache")


def test_bad_chunk_sizes_are_refused():
    with pytest.raises(ValueError, match="grad_cache.video_chunk must be a positive number of rows or null, got 0"):
        GradCacheConfig(2, 0)


def plain_checkpoint(function, *args, **kwargs):
    """`torch.utils.checkpoint.checkpoint` replaced by a direct call: the chunked step with graph."""
    return function(*args)


def with_dropout(module: torch.nn.Module, p: float) -> torch.nn.Module:
    for sub in module.modules():  # CLIP attention reads its dropout probability at each call
        if type(sub).__name__ == "CLIPAttention":
            sub.dropout = p
    return module


def test_dropout_draws_the_same_masks_in_both_passes(tiny_clip, monkeypatch):
    """With attention dropout, the cached step equals the same chunking computed with graph (no
    recomputation): pass 2 restored each chunk's generator state. The generator then continues
    as after one pass."""
    batch, cache = video_batch(list(range(6))), GradCacheConfig(2, 4)
    got = step(with_dropout(dual_module(tiny_clip, grad_cache=cache), 0.5), batch)
    after_cached = torch.get_rng_state()
    monkeypatch.setattr(grad_cache_module, "checkpoint", plain_checkpoint)
    want = step(with_dropout(dual_module(tiny_clip, grad_cache=cache), 0.5), batch)
    assert torch.equal(torch.get_rng_state(), after_cached)
    assert_same_step(got, want)
    no_dropout = step(dual_module(tiny_clip, grad_cache=cache), batch)
    assert no_dropout[0]["loss_std"] != pytest.approx(want[0]["loss_std"], rel=1e-3)  # dropout acted


# ---- GVE -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gve_media(tmp_path_factory):
    root = tmp_path_factory.mktemp("gc_media")
    video = str(write_noise_video(root / "clip.mp4", seconds=6))
    image = root / "frame.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(image)
    return {"video": video, "image": str(image)}


def gve_batch(module: GVERetrieval, media: dict, rows: range = range(4)) -> dict:
    """4 queries (text, image, text+video, text) against their positives and one hard negative each
    (the rows of a chunk hold 0, 1 or 2 images and videos); `rows` of them, as one rank's share."""
    video, image = media["video"], media["image"]
    queries = [
        MediaItem(text="a red circle moves"),
        MediaItem(image=image),
        MediaItem(text="then it stops", video=video, start=1.0, end=4.0),
        MediaItem(text="a square"),
    ]
    positives = [MediaItem(video=video), MediaItem(text="a frame"), MediaItem(video=video, start=0.0, end=3.0)]
    positives.append(MediaItem(text="the square", image=image))
    negatives = [MediaItem(image=image), MediaItem(video=video, start=2.0, end=5.0)]
    negatives += [MediaItem(text="no"), MediaItem(text="x")]
    process = module.embedder.process
    return {
        "query": process([queries[i] for i in rows]),
        "target": process([positives[i] for i in rows] + [negatives[i] for i in rows]),
        "num_negatives": 1,
        "target_keys": torch.tensor(list(rows)),
        "ids": ["abcd"[i] for i in rows],
        "task": "mixed",
    }


def gve_module(tiny_qwen, grad_cache=None, checkpointing=False, dropout=0.0, cross_device=False) -> GVERetrieval:
    torch.manual_seed(0)
    config = EmbedderConfig(
        str(tiny_qwen),
        lora=AdapterConfig(r=4, alpha=8, dropout=dropout),
        inputs=SMALL,
        gradient_checkpointing=checkpointing,
        dtype="float32",
        attn_implementation="sdpa",
    )
    module = GVERetrieval(config, temperature=0.05, cross_device=cross_device, grad_cache=grad_cache)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # LoRA B starts at zero, which would leave every A without gradient
        for name, param in module.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.5)
    return module


def test_gve_with_hard_negatives_gives_the_full_batch_loss_and_gradients(tiny_qwen, gve_media):
    plain = gve_module(tiny_qwen)
    batch = gve_batch(plain, gve_media)
    want = step(plain, batch)
    assert want[0]["margin"] != 0
    for (text_chunk, video_chunk), checkpointing in [((1, 1), False), ((2, 3), True), ((None, None), False)]:
        module = gve_module(tiny_qwen, GradCacheConfig(text_chunk, video_chunk), checkpointing)
        # as training batches come: the chunks' media rows read on the host, in the DataLoader workers
        # (without them, the splitter reads them itself: the other GVE tests here)
        assert_same_step(step(module, with_media_rows(module, batch)), want)


def with_media_rows(module: GVERetrieval, batch: dict) -> dict:
    """The batch as `TrainBatches` makes it: where each row's images and videos lie, read on the host."""
    return {**batch, "media_rows": {side: module.processing.media_rows(batch[side]) for side in ("query", "target")}}


def test_gve_chunks_and_their_positions_need_no_host_transfer(tiny_qwen, gve_media):
    """Cutting a GVE batch into chunks and computing each chunk's M-RoPE positions read nothing back
    from the device once the batch carries its `media_rows`: on PyTorch's `meta` device, which has shapes
    and no data, any such read (`.tolist()`, `int(tensor)`) raises (it does without `media_rows`)."""
    module = gve_module(tiny_qwen, GradCacheConfig(1, 1))
    batch = with_media_rows(module, gve_batch(module, gve_media))
    for side in ("query", "target"):
        on_host = batch[side]
        on_meta = {k: v.to("meta") for k, v in on_host.items()}
        split = module.row_splitter(batch["media_rows"][side])
        for start in range(len(on_host["input_ids"])):
            chunk, want = split(on_meta, start, start + 1), split(on_host, start, start + 1)
            assert {k: v.shape for k, v in chunk.items()} == {k: v.shape for k, v in want.items()}
            assert module.embedder.positions(chunk).shape == (3, *want["input_ids"].shape)
        with pytest.raises(RuntimeError, match="meta tensors"):
            module.row_splitter()(on_meta, 0, 1)


def test_gve_lora_dropout_draws_the_same_masks_in_both_passes(tiny_qwen, gve_media, monkeypatch):
    cache = GradCacheConfig(2, 3)
    module = gve_module(tiny_qwen, cache, dropout=0.3)
    batch = gve_batch(module, gve_media)
    got = step(module, batch)
    monkeypatch.setattr(grad_cache_module, "checkpoint", plain_checkpoint)
    assert_same_step(step(gve_module(tiny_qwen, cache, dropout=0.3), batch), got)


# ---- 2 gloo ranks, cross-device negatives --------------------------------------------------------
def split_invariant_partials(events, *stream):
    """MEA's partial queries as the first 1 and 2 events: the same however the batch is split."""
    return PartialBatch(
        events=[e[: k + 1] for e in events for k in range(2)],
        owner=[i for i, _ in enumerate(events) for _ in range(2)],
        slot=[k for _ in events for k in range(2)],
        num_slots=2,
    )


def cross_device_module(tiny_clip: str, grad_cache=None) -> DualEncoderRetrieval:
    module = dual_module(tiny_clip, grad_cache=grad_cache, cross_device=True)
    module.objectives.mea.partial_queries = split_invariant_partials
    return module


def rank_module_and_batch(model: str, rank: int, media: dict | None):
    """One rank's cached module and its share of the batch: the dual encoder + MEA with rows 4r..4r+3
    of `video_batch` (`media` None), or GVE with queries 2r, 2r+1 of `gve_batch`."""
    if media is None:
        return cross_device_module(model, GradCacheConfig(1, 3)), video_batch(list(range(rank * 4, rank * 4 + 4)))
    module = gve_module(model, GradCacheConfig(1, 1), cross_device=True)
    return module, gve_batch(module, media, range(2 * rank, 2 * rank + 2))


def _rank_worker(rank: int, world: int, init: str, out_dir: str, model: str, media: dict | None) -> None:
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    values, grads = step(*rank_module_and_batch(model, rank, media))
    for grad in grads.values():  # DDP's averaging
        dist.all_reduce(grad)
        grad /= world
    torch.save((values, grads), os.path.join(out_dir, f"rank{rank}.pt"))
    dist.destroy_process_group()


def assert_two_ranks_give(tmp_path, model: str, media: dict | None, want, stat: str) -> None:
    """Runs `_rank_worker` on 2 gloo ranks: each rank's loss, `stat` and averaged gradients equal `want`."""
    init = f"file://{tmp_path / 'rendezvous'}"
    run_ranks(_rank_worker, (2, init, str(tmp_path), model, media))
    for rank in range(2):
        values, grads = torch.load(tmp_path / f"rank{rank}.pt")
        assert values["loss_value"] == pytest.approx(want[0]["loss_value"], rel=1e-5)
        assert values[stat] == pytest.approx(want[0][stat], rel=1e-5)
        assert grads.keys() == want[1].keys() and len(grads) > 10
        for name, grad in want[1].items():
            assert_close_gradient(grads[name], grad, name, rel=1e-4)  # + all-reduce rounding


@pytest.mark.distributed
def test_two_ranks_with_cross_device_negatives_give_the_one_process_full_batch_step(tmp_path, tiny_clip):
    want = step(cross_device_module(str(tiny_clip)), video_batch(list(range(8))))
    assert_two_ranks_give(tmp_path, str(tiny_clip), None, want, "mea_theta")


@pytest.mark.distributed
def test_gve_on_two_ranks_with_cross_device_and_hard_negatives_gives_the_one_process_full_batch_step(
    tmp_path, tiny_qwen, gve_media
):
    """GVE A.8's cross-device negatives under caching (chunks of 1 row): each rank holds 2 of the 4
    queries with their positives and hard negatives; the gathered loss and the averaged LoRA gradients
    are those of one process holding all 4."""
    plain = gve_module(tiny_qwen, cross_device=True)
    want = step(plain, gve_batch(plain, gve_media))
    assert_two_ranks_give(tmp_path, str(tiny_qwen), gve_media, want, "margin")


def test_a_batch_other_than_the_recipes_warns_once(tiny_clip, caplog):
    module = dual_module(tiny_clip, recipe_batch=16)
    with caplog.at_level("WARNING", logger="lit_retrieval.modules.grad_cache"):
        for _ in range(2):
            module.training_step(video_batch(list(range(6))), 0)
    warnings = [r.getMessage() for r in caplog.records if "recipe_batch" in r.getMessage()]
    assert warnings == [
        "model.recipe_batch is 16 but this run has 6 (1 rank(s) x 6 pairs contrasted per step): its contrastive "
        "batch differs from the paper's; reach it with GPUs x per-GPU batch, the batch fitting in memory with "
        "model.grad_cache chunks"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="lit_retrieval.modules.grad_cache"):
        dual_module(tiny_clip, recipe_batch=6).training_step(video_batch(list(range(6))), 0)
    assert not caplog.records


def test_bf16_autocast_is_restored_in_the_recomputation(tiny_clip):
    """Under bf16 autocast (the trainer's bf16-mixed) the re-run computes in bf16 as the first pass
    did (checkpoint's recomputation check refuses tensors of another dtype); the step agrees with
    the plain bf16 step to bf16 rounding (chunked products round differently)."""
    batch = video_batch(list(range(6)))

    def bf16_step(grad_cache):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return step(dual_module(tiny_clip, grad_cache=grad_cache), batch)

    (got_values, got_grads), (want_values, want_grads) = bf16_step(GradCacheConfig(2, 2)), bf16_step(None)
    assert got_values["loss_value"] == pytest.approx(want_values["loss_value"], rel=2e-2)
    got, want = (torch.cat([g.flatten().float() for g in grads.values()]) for grads in (got_grads, want_grads))
    assert torch.nn.functional.cosine_similarity(got, want, dim=0) > 0.99
