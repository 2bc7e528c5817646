"""LayerNorm eps of the CLIP4Clip-style cross/temporal transformers.

The reference modules (CLIP4Clip's `module_cross.py`, reused by X-CLIP, TS2-Net, UATVR, UCoFiA and
PAU) normalise with their own `until_module.LayerNorm`: (x - mean) / sqrt(biased variance + 1e-12),
then weight and bias. The derivation below is written from that description, one residual block at
a time (x + attn(ln_1(x)); x + c_proj(QuickGELU(c_fc(ln_2(x)))); padded keys masked), on inputs of
tiny variance, where eps 1e-12 and 1e-5 give visibly different outputs.
"""

import pytest
import torch
from torch import nn

from lit_retrieval.models.heads import (
    PAUHead,
    SeqTransfHead,
    TightTransfHead,
    TS2NetHead,
    UATVRHead,
    UCoFiAHead,
    XCLIPHead,
)


def reference_layer_norm(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def reference_block(block, x, mask, eps):
    """One residual attention block of CLIP4Clip's cross transformer on one sequence `x` [n, C]."""
    attn = block.self_attn
    heads, dim = attn.num_heads, attn.head_dim
    h = reference_layer_norm(x, block.layer_norm1.weight, block.layer_norm1.bias, eps)
    q, k, v = (proj(h).view(len(x), heads, dim) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
    outs = []
    for head in range(heads):
        logits = (q[:, head] @ k[:, head].t()) * dim**-0.5 + (~mask).float()[None, :] * -1e6
        outs.append(logits.softmax(-1) @ v[:, head])
    x = x + attn.out_proj(torch.cat(outs, -1))
    h = reference_layer_norm(x, block.layer_norm2.weight, block.layer_norm2.bias, eps)
    hidden = block.mlp.fc1(h)
    return x + block.mlp.fc2(hidden * torch.sigmoid(1.702 * hidden))


def reference_temporal(module, frames, mask, eps):
    out = []
    for seq, keep in zip(frames, mask):
        x = seq + module.positions.weight[: len(seq)]
        for block in module.blocks:
            x = reference_block(block, x, keep, eps)
        out.append(x)
    return torch.stack(out)


def small_frames():
    g = torch.Generator().manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    return 1e-3 * torch.randn(2, 5, 64, generator=g), mask


def test_seq_transf_temporal_module_matches_clip4clip_layer_norm(encoder):
    torch.manual_seed(0)
    head = SeqTransfHead(layers=2)
    head.bind(encoder)
    with torch.no_grad():
        head.temporal.positions.weight.mul_(1e-3)  # tiny-variance inputs, where eps shows
        frames, mask = small_frames()
        got = head.temporal(frames, mask)
        expected = reference_temporal(head.temporal, frames, mask, 1e-12)
        old = reference_temporal(head.temporal, frames, mask, 1e-5)
    torch.testing.assert_close(got[mask], expected[mask], atol=1e-5, rtol=1e-4)
    assert (got[mask] - old[mask]).abs().max() > 1e-2  # the eps is visible at this scale


def test_layer_norm_eps_argument_restores_the_previous_default_and_checkpoints_load(encoder):
    """eps is not a state-dict entry: a head built with either eps loads the other's weights."""
    torch.manual_seed(0)
    new = SeqTransfHead(layers=2)
    new.bind(encoder)
    old = SeqTransfHead(layers=2, layer_norm_eps=1e-5)
    old.bind(encoder)
    old.load_state_dict(new.state_dict())
    with torch.no_grad():
        new.temporal.positions.weight.mul_(1e-3)
        old.temporal.positions.weight.copy_(new.temporal.positions.weight)
        frames, mask = small_frames()
        torch.testing.assert_close(
            old.temporal(frames, mask)[mask],
            reference_temporal(old.temporal, frames, mask, 1e-5)[mask],
            atol=1e-5,
            rtol=1e-4,
        )


HEADS = {
    "seqTransf": (lambda: SeqTransfHead(layers=1), ["temporal"], []),
    "tightTransf": (lambda: TightTransfHead(layers=1, max_frames=8), ["cross", "pooler"], []),
    "xclip": (lambda: XCLIPHead(temporal_layers=1, max_frames=8), ["temporal"], []),
    "ts2net": (lambda: TS2NetHead(temporal_layers=1, max_frames=8, shift_blocks=0), ["temporal"], ["scorer"]),
    "ucofia": (lambda: UCoFiAHead(temporal_layers=1, max_frames=8, shift_blocks=0), ["temporal"], ["scorer"]),
    "uatvr": (lambda: UATVRHead(layers=1, max_frames=12), ["fusion"], ["text_prob", "video_prob"]),
    "pau": (lambda: PAUHead(layers=1, max_frames=8), ["temporal"], []),
}


@pytest.mark.parametrize("name", sorted(HEADS))
def test_which_layer_norms_use_which_eps(name, tiny_clip):
    """Re-implemented CLIP4Clip modules: 1e-12; layers whose reference is torch's nn.LayerNorm
    (TS2-Net's and UCoFiA's token scorer, UATVR's PIE heads) and CLIP's own layers: 1e-5."""
    from lit_retrieval.models.encoders import CLIPEncoder

    encoder = CLIPEncoder(pretrained=str(tiny_clip))
    make, cross, torch_default = HEADS[name]
    head = make()
    head.bind(encoder)
    norms = {name: m.eps for name, m in head.named_modules() if isinstance(m, nn.LayerNorm)}
    assert norms and set(norms) == {n for n in norms if n.split(".")[0] in cross + torch_default}
    for module_name, eps in norms.items():
        assert eps == (1e-12 if module_name.split(".")[0] in cross else 1e-5), module_name
    assert all(m.eps == 1e-5 for m in encoder.modules() if isinstance(m, nn.LayerNorm))
