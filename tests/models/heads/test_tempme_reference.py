"""TempMe's merging ViT against a step-by-step derivation of the released algorithm.

The reference side below is written from the reference's description (LunarShen/TempMe,
`ToMeBlock.forward`, `bipartite_soft_matching`, `merge_wavg`, `get_video_feat`; ToMe, arXiv
2210.09461 Sec. 3), one sequence at a time with Python loops, and calls nothing of the project:

- ToMe's sets alternate over the whole sequence, so the set A (tokens merged away) is every
  token after the class tokens at an *even absolute index* and B every one at an odd index;
  each A token's match is its most similar B token (cosine of the metric), the r best-matched A
  tokens are size-weighted into their matches, and the sequence becomes [class tokens, kept A
  tokens in order, B tokens];
- image merging: r tokens per frame after attention, matched on the head-averaged keys;
- at a merge layer, groups of r_f clips become one sequence (class tokens first), the
  cross-clip merge matches on the states *before* the layer's frame positions are added, then
  attention, then intra-clip merging; later layers merge 10% of the tokens after attention;
- attention adds log(size) to every key's logit.
"""

import pytest
import torch
from transformers import CLIPVisionConfig, CLIPVisionModel

from lit_retrieval.models.encoders import CLIPEncoder
from lit_retrieval.models.heads import TempMeHead
from lit_retrieval.models.heads.tempme import TokenMerging


def reference_merge(seq, size, metric, r, cls):
    """Bipartite soft matching of one sequence `seq` [n, C] with sizes `size` [n]."""
    n = seq.shape[0]
    set_a = [i for i in range(cls, n) if i % 2 == 0]
    set_b = [i for i in range(cls, n) if i % 2 == 1]
    assert r <= len(set_a), "the reference would fail here"
    if r <= 0:
        return seq, size
    unit = metric / metric.norm(dim=-1, keepdim=True)
    match = {}
    for a in set_a:
        sims = [float(unit[a] @ unit[b]) for b in set_b]
        best = max(range(len(set_b)), key=lambda k: sims[k])
        match[a] = (sims[best], set_b[best])
    ranked = sorted(set_a, key=lambda a: -match[a][0])
    merged, kept = ranked[:r], sorted(ranked[r:])
    total = {b: seq[b] * size[b] for b in set_b}
    weight = {b: size[b].clone() for b in set_b}
    for a in merged:
        b = match[a][1]
        total[b] = total[b] + seq[a] * size[a]
        weight[b] = weight[b] + size[a]
    rows = [seq[i] for i in range(cls)] + [seq[a] for a in kept] + [total[b] / weight[b] for b in set_b]
    sizes = [size[i] for i in range(cls)] + [size[a] for a in kept] + [weight[b] for b in set_b]
    return torch.stack(rows), torch.stack(sizes)


def reference_attention(block, x, size):
    """Multi-head self-attention of one normalised sequence `x` [n, C] with log(size) added to the
    logits; returns the output and the head-averaged keys."""
    attn = block.self_attn
    heads, dim = attn.num_heads, attn.head_dim
    q, k, v = (proj(x).view(len(x), heads, dim) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    outs = []
    for h in range(heads):
        logits = (q[:, h] @ k[:, h].t()) * dim**-0.5 + size.log()[None, :]
        outs.append(logits.softmax(-1) @ v[:, h])
    return attn.out_proj(torch.cat(outs, -1)), k.mean(1)


def reference_tempme(
    vision, pixels, frames_per_video, image_r, merge_layers, merge_frames, tables, cross=0.3, intra=0.1
):
    """The reference's video forward; returns the token table [clips, tokens, C] after every block
    and the class tokens of every frame (before `post_layernorm`)."""
    hidden = vision.pre_layrnorm(vision.embeddings(pixels))
    seqs = [hidden[i] for i in range(len(hidden))]
    sizes = [torch.ones(hidden.shape[1]) for _ in seqs]
    cls, clips, token_num, schedule, table = 1, frames_per_video, hidden.shape[1], list(merge_frames), 0
    history = []
    for depth, block in enumerate(vision.encoder.layers):
        if depth in merge_layers:
            group = schedule.pop(0)
            r0 = min(int(token_num * group * cross), (token_num - cls) * group // 2)
            r_after = min(int((token_num * group - r0) * intra), ((token_num - cls) * group - r0) // 2)
            grouped_seqs, grouped_sizes = [], []
            for start in range(0, len(seqs), group):
                members = range(start, start + group)
                seq = torch.cat([seqs[m][:cls] for m in members] + [seqs[m][cls:] for m in members])
                size = torch.cat([sizes[m][:cls] for m in members] + [sizes[m][cls:] for m in members])
                pos = [tables[table][m % clips] for m in members]  # the clip's row of this layer's table
                pos_seq = torch.stack(
                    [pos[j] for j in range(group) for _ in range(cls)]
                    + [pos[j] for j in range(group) for _ in range(token_num - cls)]
                )
                if r0 > 0:
                    seq, size = reference_merge(seq + pos_seq, size, seq, r0, cls * group)
                grouped_seqs.append(seq)
                grouped_sizes.append(size)
            seqs, sizes = grouped_seqs, grouped_sizes
            cls, clips, token_num, table = cls * group, clips // group, token_num * group - r0, table + 1
        elif depth < merge_layers[0]:
            r_after = image_r
        else:
            r_after = min(int(token_num * intra), (token_num - cls) // 2)
        new_seqs, new_sizes = [], []
        for seq, size in zip(seqs, sizes):
            out, keys = reference_attention(block, block.layer_norm1(seq), size)
            seq = seq + out
            seq, size = reference_merge(seq, size, keys, r_after, cls)
            new_seqs.append(seq + block.mlp(block.layer_norm2(seq)))
            new_sizes.append(size)
        seqs, sizes, token_num = new_seqs, new_sizes, token_num - r_after
        history.append(torch.stack(seqs))
    return history, torch.cat([seq[:cls] for seq in seqs])


def project_tables(vision):
    """Hooks that rebuild each block's output from the project's forward (the input of
    `layer_norm2` plus the MLP's output)."""
    tables, handles, pending = [], [], {}
    for block in vision.encoder.layers:
        handles.append(block.layer_norm2.register_forward_hook(lambda m, args, out: pending.update(x=args[0])))
        handles.append(block.mlp.register_forward_hook(lambda m, args, out: tables.append(pending["x"] + out)))
    return tables, handles


def random_tables(merger, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for table in merger.frame_positions:
            table.copy_(0.5 * torch.randn(table.shape, generator=g))


def compare(vision, merger, pixels, frames_per_video, image_r, merge_layers, merge_frames):
    videos = len(pixels) // frames_per_video
    tables, handles = project_tables(vision)
    with torch.no_grad():
        got = merger(vision, pixels, torch.full((videos,), frames_per_video))
        for handle in handles:
            handle.remove()
        history, expected = reference_tempme(
            vision,
            pixels,
            frames_per_video,
            image_r,
            merge_layers,
            merge_frames,
            [t.detach() for t in merger.frame_positions],
        )
    assert [tuple(t.shape) for t in tables] == [tuple(t.shape) for t in history]
    diffs = [float((a - b).abs().max()) for a, b in zip(tables, history)]
    for depth, (a, b) in enumerate(zip(tables, history)):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m: f"block {depth}: {m}")
    return got, expected, max(diffs)


@pytest.mark.parametrize("image_r, merge_layers", [(2, [3, 4]), (12, [2, 4])])
def test_token_merging_follows_the_reference_block_by_block(image_r, merge_layers):
    """Two heads, 37 tokens a frame (odd class-token counts at image merging and at the first
    merge layer, an even count at the second), random frame positions."""
    torch.manual_seed(0)
    config = CLIPVisionConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=6, num_attention_heads=2, image_size=48, patch_size=8
    )
    vision = CLIPVisionModel(config).eval()
    merge_frames = [3, 2]
    merger = TokenMerging(6, 6, 64, image_r=image_r, merge_layers=merge_layers, merge_frames=merge_frames)
    random_tables(merger, seed=1)
    pixels = torch.randn(12, 3, 48, 48, generator=torch.Generator().manual_seed(2))
    got, expected, _ = compare(vision, merger, pixels, 6, image_r, merge_layers, merge_frames)
    torch.testing.assert_close(vision.post_layernorm(got), vision.post_layernorm(expected), atol=1e-4, rtol=1e-4)
    assert merger.token_counts[-1] < merger.token_counts[0]


def test_tempme_head_frame_features_follow_the_reference_at_vit_b32_geometry(tmp_path):
    """The default schedule (12 blocks, 50 tokens a frame, 12 frames: r = 2, merge layers 8-9-10
    with 2-2-3 clips) through the encoder, LoRA adapters and projection included."""
    from lit_retrieval.models.encoders.tiny import save_tiny_clip

    path = save_tiny_clip(tmp_path, image_size=224, patch_size=32, width=128, layers=12, embed_dim=32)
    torch.manual_seed(0)
    encoder = CLIPEncoder(pretrained=str(path)).eval()
    head = TempMeHead(num_frames=12)
    head.bind(encoder)
    random_tables(head.merger, seed=3)
    pixels = torch.randn(2, 12, 3, 224, 224, generator=torch.Generator().manual_seed(4))
    mask = torch.ones(2, 12, dtype=torch.bool)
    vision = encoder.vision
    _, expected, table_diff = compare(vision, head.merger, pixels.flatten(0, 1), 12, 2, [8, 9, 10], [2, 2, 3])
    with torch.no_grad():
        got = encoder.encode_video(pixels, mask).frames
        reference = encoder.visual_projection(vision.post_layernorm(expected)).view(2, 12, -1)
    torch.testing.assert_close(got, reference, atol=1e-4, rtol=1e-4)
    print(f"tempme max abs diff: tables {table_diff:.2e}, frame features {float((got - reference).abs().max()):.2e}")
