import torch
from transformers import CLIPModel

from lit_retrieval.models.encoders import CLIPEncoder, load_longclip_checkpoint, stretch_position_embedding


def test_stretch_follows_the_kps_rule():
    weight = torch.randn(77, 8, dtype=torch.float64)
    out = stretch_position_embedding(weight, keep=20, ratio=4)
    assert out.shape == (248, 8)
    assert torch.equal(out[:20], weight[:20])
    for n in range(20, 248):
        u = 20 + (n - 20) / 4
        if n < 244:
            i, a = int(u), u - int(u)
            expected = (1 - a) * weight[i] + a * weight[i + 1]
        else:  # extrapolated tail past the last position
            expected = weight[76] + ((n - 244) / 4) * (weight[76] - weight[75])
        torch.testing.assert_close(out[n], expected)


def test_encoder_stretches_text_positions_when_asked(tiny_clip):
    encoder = CLIPEncoder(pretrained=str(tiny_clip), max_text_len=248)
    original = CLIPModel.from_pretrained(tiny_clip).text_model.embeddings.position_embedding.weight
    table = encoder.text.text_model.embeddings.position_embedding.weight
    torch.testing.assert_close(table, stretch_position_embedding(original))
    long_text = "x" * 200  # 200 characters -> 202 tokens with the character tokenizer
    assert encoder.encode_text([long_text]).mask.sum() == 202


def hf_to_openai(model: CLIPModel, extra_res: torch.Tensor | None = None) -> dict:
    """Inverse key map (test helper): an HF CLIPModel as an OpenAI-format state dict."""
    sd = model.state_dict()
    out = {
        "token_embedding.weight": sd["text_model.embeddings.token_embedding.weight"],
        "positional_embedding": sd["text_model.embeddings.position_embedding.weight"],
        "ln_final.weight": sd["text_model.final_layer_norm.weight"],
        "ln_final.bias": sd["text_model.final_layer_norm.bias"],
        "text_projection": sd["text_projection.weight"].t(),
        "visual.proj": sd["visual_projection.weight"].t(),
        "visual.class_embedding": sd["vision_model.embeddings.class_embedding"],
        "visual.conv1.weight": sd["vision_model.embeddings.patch_embedding.weight"],
        "visual.positional_embedding": sd["vision_model.embeddings.position_embedding.weight"],
        "visual.ln_pre.weight": sd["vision_model.pre_layrnorm.weight"],
        "visual.ln_pre.bias": sd["vision_model.pre_layrnorm.bias"],
        "visual.ln_post.weight": sd["vision_model.post_layernorm.weight"],
        "visual.ln_post.bias": sd["vision_model.post_layernorm.bias"],
        "logit_scale": sd["logit_scale"],
    }
    for tower, src in (("text_model", "transformer"), ("vision_model", "visual.transformer")):
        n = getattr(model.config, "text_config" if tower == "text_model" else "vision_config").num_hidden_layers
        for i in range(n):
            p, q = f"{tower}.encoder.layers.{i}", f"{src}.resblocks.{i}"
            out[f"{q}.attn.in_proj_weight"] = torch.cat([sd[f"{p}.self_attn.{x}_proj.weight"] for x in "qkv"])
            out[f"{q}.attn.in_proj_bias"] = torch.cat([sd[f"{p}.self_attn.{x}_proj.bias"] for x in "qkv"])
            for a, b in (
                ("attn.out_proj", "self_attn.out_proj"),
                ("ln_1", "layer_norm1"),
                ("ln_2", "layer_norm2"),
                ("mlp.c_fc", "mlp.fc1"),
                ("mlp.c_proj", "mlp.fc2"),
            ):
                out[f"{q}.{a}.weight"], out[f"{q}.{a}.bias"] = sd[f"{p}.{b}.weight"], sd[f"{p}.{b}.bias"]
    if extra_res is not None:
        out["positional_embedding_res"] = extra_res
    return out


def test_longclip_checkpoint_merges_fine_tuned_positions(tiny_clip, tmp_path):
    model = CLIPModel.from_pretrained(tiny_clip).eval()
    frozen = stretch_position_embedding(model.text_model.embeddings.position_embedding.weight.detach())
    res = frozen + 0.5  # the separately fine-tuned table; rows < 20 must be ignored
    sd = hf_to_openai(model)
    sd["positional_embedding"] = frozen
    sd["positional_embedding_res"] = res
    path = tmp_path / "longclip.pt"
    torch.save(sd, path)
    loaded = load_longclip_checkpoint(path)
    table = loaded.text_model.embeddings.position_embedding.weight
    assert table.shape[0] == 248
    torch.testing.assert_close(table[:20], frozen[:20])
    torch.testing.assert_close(table[20:], res[20:])
    pixels = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(
        loaded.eval().get_image_features(pixel_values=pixels), model.get_image_features(pixel_values=pixels)
    )
    ids = torch.tensor([[512, 70, 71, 513]])
    model.text_model.embeddings.position_embedding.weight.data = table[:77].clone()
    torch.testing.assert_close(loaded.get_text_features(input_ids=ids), model.get_text_features(input_ids=ids))
