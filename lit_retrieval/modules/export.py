"""A trained dual encoder in the formats its users load (`lit-retrieval export-dual-encoder`, docs/export.md).

The folder written:

- `towers/`: both towers in their own library's format (`VideoTextEncoder.save_towers`): a transformers
  `save_pretrained` folder for CLIP / Long-CLIP / SigLIP, open_clip's hub layout for open_clip models, with
  the trained temperature (and SigLIP's bias) in the model's own `logit_scale` / `logit_bias`;
- `head.safetensors`: the head's own parameters (its `state_dict`: `logit_scale`, and the temporal modules of
  the heads that have them), and `head_config.json`: the head's class, how frames are sampled and
  normalised, how texts are encoded, the contrastive loss and its bias;
- `README.md`: a model card in the Hugging Face Hub's format (YAML front matter: library, tags, the run's
  metrics as a `model-index`), with the training config and the metrics from the run's own files.

For MeanP (CLIP4Clip's parameter-free pooling) the towers alone reproduce the model: the video is the unit
mean of its unit frame features, the text the unit text feature, the score their dot product.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from lit_retrieval.data.media.normalize import CLIP_MEAN, CLIP_STD

TOWERS = "towers"
HEAD_WEIGHTS = "head.safetensors"
HEAD_CONFIG = "head_config.json"
CARD = "README.md"

MEANP_USE = {
    "transformers": """```python
import torch, torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

model = AutoModel.from_pretrained("{folder}/towers").eval()
tokenizer = AutoTokenizer.from_pretrained("{folder}/towers")
ids = tokenizer(["a person opens a door"], {padding}truncation=True, max_length={max_len}, return_tensors="pt")
text = F.normalize(model.get_text_features(input_ids=ids["input_ids"]{mask}).pooler_output, dim=-1)
# frames: [T, 3, {size}, {size}] of one video, resized and centre-cropped, normalised with mean {mean}, std {std}
frames = F.normalize(model.get_image_features(pixel_values=frames).pooler_output, dim=-1)
video = F.normalize(frames.mean(0, keepdim=True), dim=-1)
score = text @ video.t()
```""",
    "open_clip": """```python
import torch, torch.nn.functional as F
import open_clip

model = open_clip.create_model("local-dir:{folder}/towers").eval()
tokenizer = open_clip.get_tokenizer("local-dir:{folder}/towers")
text = F.normalize(model.encode_text(tokenizer(["a person opens a door"])), dim=-1)
# frames: [T, 3, {size}, {size}] of one video, resized and centre-cropped, normalised with mean {mean}, std {std}
video = F.normalize(F.normalize(model.encode_image(frames), dim=-1).mean(0, keepdim=True), dim=-1)
score = text @ video.t()
```""",
}


def head_settings(module: Any, frames: dict[str, Any], library: str) -> dict[str, Any]:
    """What `head_config.json` holds: enough to use the towers as the project did."""
    sigmoid = module.objectives.sigmoid
    head = module.head
    return {
        "head": f"{type(head).__module__}.{type(head).__name__}",
        "indexable": head.indexable,
        "pooling": getattr(head, "pooling", None),
        "towers": {"library": library, "folder": TOWERS},
        "encoder": f"{type(module.encoder).__module__}.{type(module.encoder).__name__}",
        "text": {"query_mode": module.query_mode, "max_length": module.encoder.max_text_len},
        "frames": {
            "num_frames": frames.get("num_frames"),
            "image_size": module.encoder.image_size,
            "mean": list(frames.get("mean") or CLIP_MEAN),
            "std": list(frames.get("std") or CLIP_STD),
        },
        "logit_scale": float(head.logit_scale.detach()),
        "contrastive": {
            "loss": "sigmoid" if sigmoid is not None else "infonce",
            "logit_bias": float(sigmoid.loss.logit_bias.detach()) if sigmoid is not None else None,
        },
    }


def model_card(settings: dict[str, Any], name: str, config_text: str | None, metrics: dict[str, Any] | None) -> str:
    """The Hub's model-card format: YAML front matter (library, tags, `model-index` of the run's metrics)
    and a body saying how to load the export, what the run trained on and the metrics it measured."""
    head = settings["head"].rsplit(".", 1)[-1]
    library = settings["towers"]["library"]
    results = []
    for stage, values in (metrics or {}).items():
        scalar = [{"type": k, "value": float(v), "name": f"{stage} {k}"} for k, v in values.items() if _number(v)]
        if scalar:
            results.append({"task": {"type": "text-to-video-retrieval"}, "dataset": {"name": stage, "type": stage},
                            "metrics": scalar})  # fmt: skip
    front: dict[str, Any] = {
        "library_name": library,
        "tags": ["video-text-retrieval", "lit-retrieval", head, settings["encoder"].rsplit(".", 1)[-1]],
    }
    if results:
        front["model-index"] = [{"name": name, "results": results}]
    frames = settings["frames"]
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).rstrip(),
        "---",
        "",
        f"# {name}",
        "",
        f"A text-to-video dual encoder trained with lit-retrieval: {settings['encoder'].rsplit('.', 1)[-1]} towers "
        f"with the {head} head, {settings['contrastive']['loss']} loss. `towers/` loads with {library} alone; "
        f"`head.safetensors` and `head_config.json` hold the head's own parameters and settings.",
        "",
        f"Frames: {frames['num_frames']} per video, {frames['image_size']} px, mean {frames['mean']}, "
        f"std {frames['std']}. Texts: at most {settings['text']['max_length']} tokens.",
        "",
    ]
    if head == "MeanPHead" and settings.get("pooling") == "frames":
        text = settings["text"]
        padding = 'padding="max_length", ' if library == "transformers" and "Siglip" in settings["encoder"] else ""
        mask = "" if padding else ', attention_mask=ids["attention_mask"]'
        use = MEANP_USE[library].format(
            folder=".",
            padding=padding or "padding=True, ",
            mask=mask,
            max_len=text["max_length"],
            size=frames["image_size"],
            mean=frames["mean"],
            std=frames["std"],
        )
        lines += ["## Use", "", "MeanP (CLIP4Clip) needs no code of its own: the towers reproduce its scores.", "",
                  use, ""]  # fmt: skip
    else:
        lines += ["## Use", "", f"{head} scores with its own layers (`head.safetensors`): use lit-retrieval's "
                  f"`{settings['head']}` with the towers.", ""]  # fmt: skip
    if metrics:
        lines += ["## Metrics", "", "| split | metric | value |", "| --- | --- | --- |"]
        lines += [f"| {s} | {k} | {v:.4g} |" for s, values in metrics.items() for k, v in values.items() if _number(v)]
        lines.append("")
    if config_text:
        lines += ["## Training config", "", "```yaml", config_text.rstrip(), "```", ""]
    return "\n".join(lines)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def export_dual_encoder(
    module: Any,
    out: Path,
    frames: dict[str, Any],
    name: str,
    config_text: str | None = None,
    metrics: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write `module` (a `DualEncoderRetrieval`) into `out` (module notes); `frames`: the data settings
    (`num_frames`, `mean`, `std`); `config_text`, `metrics`: the run's config and `metrics.json`.
    Returns the head settings written."""
    from safetensors.torch import save_file

    sigmoid = module.objectives.sigmoid
    bias = float(sigmoid.loss.logit_bias.detach()) if sigmoid is not None else None
    out.mkdir(parents=True, exist_ok=True)
    library = module.encoder.save_towers(out / TOWERS, float(module.head.logit_scale.detach()), bias)
    save_file({k: v.detach().contiguous() for k, v in module.head.state_dict().items()}, str(out / HEAD_WEIGHTS))
    settings = head_settings(module, frames, library)
    (out / HEAD_CONFIG).write_text(json.dumps(settings, indent=2))
    (out / CARD).write_text(model_card(settings, name, config_text, metrics))
    return settings
