"""Writes a (merged) GVE model as a directory in the layout of the released Qwen2.5-VL / GVE
checkpoints, which transformers 4.5x and 5.x both load as `Qwen2_5_VLForConditionalGeneration`
with `AutoProcessor`. The released GVE is plain Qwen2.5-VL weights: its class
(Alibaba-NLP/VRAG:search_engine/models/GVE/qwen25vl/qwen25vl_model.py, `Qwen25VLForEmbedding`)
subclasses `Qwen2_5_VLForConditionalGeneration` and only overrides `forward`.

transformers 5 saves a nested `config.json` (`text_config`, `rope_parameters`, `dtype`), one
`processor_config.json` and a tokenizer config listing `extra_special_tokens`; 4.5x reads none of
them correctly (4.51 fails to build the model, 4.57 loses `mrope_section`). The release layout:
  - `config.json`: text fields at the top level, `rope_scaling = {"type": "mrope",
    "mrope_section": [...]}`, `rope_theta`, `torch_dtype`, `vision_config` nested;
  - `preprocessor_config.json` (image processor, with `min_pixels` / `max_pixels`) and
    `video_preprocessor_config.json` (read from 4.52 on);
  - tokenizer files with `additional_special_tokens`, `chat_template.jinja`.
Weights keep the key names 5.x writes (`model.layers.*`, `visual.*`), which all versions read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from torch import nn

# text-config fields not copied to the top level: 5.x-only, or set below
NOT_COPIED = {"model_type", "rope_parameters", "layer_types", "dtype", "torch_dtype", "use_cache"}


def release_config(saved: dict[str, Any]) -> dict[str, Any]:
    """A transformers-5 `config.json` dict in the released layout (flat text fields, `rope_scaling`)."""
    config = dict(saved)
    text = dict(config.pop("text_config", None) or {})
    rope = text.get("rope_parameters") or config.pop("rope_parameters", None) or {}
    if "mrope_section" not in rope:
        raise ValueError(f"not a Qwen2.5-VL config: no mrope_section in its rope parameters ({rope})")
    dtype = config.pop("dtype", None) or config.pop("torch_dtype", None) or text.get("dtype") or "float32"
    for key, value in text.items():
        if key in NOT_COPIED:
            continue
        known = config.get(key)
        if known is not None and value is not None and known != value:  # one flat namespace cannot hold both
            raise ValueError(f"config field {key!r}: model {known!r} vs text config {value!r}")
        config[key] = value if value is not None else known
    config["rope_theta"] = rope.get("rope_theta", 1_000_000.0)
    config["rope_scaling"] = {"type": "mrope", "mrope_section": list(rope["mrope_section"])}
    config["torch_dtype"] = str(dtype).removeprefix("torch.")
    config["use_cache"] = True  # the embedder turns it off in memory; generation wants it on
    return config


def _json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _with_pixel_bounds(settings: dict[str, Any]) -> dict[str, Any]:
    """4.5x image processors read `min_pixels` / `max_pixels`; 5.x reads `size`."""
    size = settings.get("size") or {}
    if "shortest_edge" in size:
        settings = {**settings, "min_pixels": size["shortest_edge"], "max_pixels": size["longest_edge"]}
    return {**settings, "processor_class": "Qwen2_5_VLProcessor"}


def write_release_processor(processor: Any, out: Path) -> None:
    """The processor as separate 4.5x-readable files (no `processor_config.json`)."""
    processor.save_pretrained(str(out))
    (out / "processor_config.json").unlink(missing_ok=True)
    _json(out / "preprocessor_config.json", _with_pixel_bounds(processor.image_processor.to_dict()))
    _json(out / "video_preprocessor_config.json", _with_pixel_bounds(processor.video_processor.to_dict()))
    tokenizer_file = out / "tokenizer_config.json"
    tokenizer = json.loads(tokenizer_file.read_text())
    extra = tokenizer.pop("extra_special_tokens", None)
    if isinstance(extra, list):  # 5.x lists them here; 4.5x expects a dict here and the list below
        tokenizer["additional_special_tokens"] = extra
    elif extra:
        tokenizer["extra_special_tokens"] = extra
    for key in ("backend", "is_local", "local_files_only"):  # 5.x bookkeeping, not tokenizer settings
        tokenizer.pop(key, None)
    _json(tokenizer_file, tokenizer)


def save_release(model: nn.Module, processor: Any, out_dir: str | Path) -> Path:
    """Write `model` (a plain transformers Qwen2.5-VL, LoRA already merged) and `processor`."""
    out = Path(out_dir)
    model.save_pretrained(str(out))
    _json(out / "config.json", release_config(json.loads((out / "config.json").read_text())))
    write_release_processor(processor, out)
    return out
