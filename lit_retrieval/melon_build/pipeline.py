"""The stage runner of `build-melon` (MELON Sec. 3, supp. C, F):

    collect -> qa-to-caption -> t2t -> v2t -> summarise -> judge -> write

`collect` reads every source (cheap, in every process); the per-video stages take the videos of
this shard (`shard_of`: a hash of the video id, so the split does not depend on the other videos
or on the order of the sources) and keep each video's result in a `StageCache`, keyed by its
inputs and settings: a re-run, or a run after an interruption, does only what is missing, and the
LLM stages ask the endpoint only for videos without a result (the chat client's answer cache
covers a video interrupted mid-stage). `write` reads every shard's results (computing any that are
missing), so a build of N shards followed by `--stage write` gives the annotation of a 1-shard build.

A video whose LLM request fails (retries exhausted) is listed under `failures` and left out of the
output; nothing is cached for it, so the next run asks again.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from PIL import Image

from lit_retrieval.data.media.identity import file_version, tree_identity
from lit_retrieval.data.media.video import SamplingSpec, VideoDecodeError, sample_video
from lit_retrieval.melon_build import llm_stages, report
from lit_retrieval.melon_build.chat import CallLog, ChatClient, ChatFailure, logged_calls
from lit_retrieval.melon_build.config import BuildConfig, chat_config, llm_settings
from lit_retrieval.melon_build.filters import (
    SentenceEncoder,
    sentence_encoder,
    load_embedder,
    redundant_pairs,
    segment_similarities,
    v2t_identity,
)
from lit_retrieval.melon_build.llm_stages import VideoRejected
from lit_retrieval.melon_build.sources import Segment, SourceVideo, collect
from lit_retrieval.melon_build.stage_cache import StageCache, stage_key
from lit_retrieval.progress import Progress
from lit_retrieval.shipped import resolve_model_path

log = logging.getLogger(__name__)

STAGES = ("collect", "qa-to-caption", "t2t", "v2t", "summarise", "judge", "write")


def shard_of(uid: str, shards: int) -> int:
    """The shard (of `shards`) that processes video `uid`: a stable hash, so every process agrees."""
    return int(hashlib.sha256(uid.encode()).hexdigest()[:12], 16) % shards


def split_of(uid: str, test_fraction: float, seed: int) -> str:
    """`test` when the seeded hash of `uid` (uniform in [0, 1)) is below `test_fraction`, else
    `train` (supp. D's 70:30 ratio in expectation; a video's split never depends on other videos)."""
    value = int(hashlib.sha256(f"{seed}:{uid}".encode()).hexdigest()[:12], 16) / 16**12
    return "test" if value < test_fraction else "train"


@dataclass
class BuildState:
    """What the stages have produced so far for the videos in hand."""

    videos: dict[str, SourceVideo]
    collect_counts: dict[str, dict]
    removals: list[dict] = field(default_factory=list)  # {stage, source, video, reason, detail}
    segment_removals: Counter = field(default_factory=Counter)  # (stage, source) -> segments removed
    v2t_scores: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failures: list[dict] = field(default_factory=list)  # {stage, video, reason}
    events: dict[str, list[dict]] = field(default_factory=dict)  # uid -> [{theme, description, start, end, method}]
    splits: dict[str, str] = field(default_factory=dict)  # uid -> train / test
    verdicts: dict[str, list[dict]] = field(default_factory=dict)  # uid -> the judge's verdict per event

    def remove(self, stage: str, uid: str, reason: str, detail: str) -> None:
        video = self.videos.pop(uid)
        self.removals.append(
            {"stage": stage, "source": video.source, "video": video.video_id, "reason": reason, "detail": detail}
        )

    def fail(self, stage: str, uid: str, reason: str) -> None:
        self.videos.pop(uid)
        self.failures.append({"stage": stage, "video": uid, "reason": reason})


class Build:
    """One process of a build: shard `shard` of `shards` (0 of 1: the whole build)."""

    def __init__(self, config: BuildConfig, out: Path, shard: int = 0, shards: int = 1) -> None:
        self.config = config
        self.out = Path(out)
        self.shard, self.shards = shard, shards
        self.settings = llm_settings(config.llm)
        self.chat_config = chat_config(config.chat)
        # the judge reads frames: its own (image-reading) endpoint when `judge_chat` is given
        self.endpoints = {"text": self.chat_config, "judge": chat_config(config.judge_chat) or self.chat_config}
        self._clients: dict[str, ChatClient] = {}
        # every call of this process, as it is sent (one file per shard): the statistics count the
        # calls of every run and shard of the build, also of runs that were killed
        self.call_log = CallLog(self.out / "cache" / "llm-calls" / f"shard-{shard}-of-{shards}.jsonl")
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def cache(self, stage: str) -> StageCache:
        return StageCache(self.out, stage, self.shard, self.shards)

    def client(self, role: str = "text") -> ChatClient:
        """The chat client of `role` (`text`: qa-to-caption and summarise; `judge`), made on first use;
        one client per endpoint (the judge shares `text`'s without its own `judge_chat`), so the
        endpoint has one concurrency limit and one record of having been reached."""
        if self.endpoints[role] == self.endpoints["text"]:
            role = "text"
        with self._lock:
            if role not in self._clients:
                config = self.endpoints[role]
                assert config is not None
                self._clients[role] = ChatClient(config, self.out / "cache" / "chat", self.call_log)
            return self._clients[role]

    def llm_identity(self, role: str = "text") -> Any:
        """What an LLM stage's result depends on besides its input: the model, its sampling and the prompts."""
        c = self.endpoints[role]
        chat = None if c is None else [c.model, c.temperature, c.max_tokens, c.extra_body]
        return [chat, self.settings.fingerprint()]

    def llm_calls(self) -> dict[str, dict[str, Any]]:
        """Per stage, over every run and shard of this build: videos asked about, calls, calls per video."""
        calls = logged_calls(self.call_log.path.parent)
        out = {}
        for stage in sorted({s for s, _ in calls}):
            videos = [v for s, v in calls if s == stage]
            total = sum(n for (s, _), n in calls.items() if s == stage)
            out[stage] = {"videos": len(videos), "calls": total, "calls_per_video": round(total / len(videos), 3)}
        return out

    def _llm_stage(
        self, stage: str, state: BuildState, uids: list[str], key_of: Callable[[str], str], ask: Callable[[str], Any]
    ) -> dict[str, Any]:
        """Results of `ask(uid)` for `uids`, from the cache or asked concurrently (the endpoint's
        concurrency); a `ChatFailure` marks that video failed, a `VideoRejected` removes it, an
        `EndpointError` stops the stage (videos not yet started are not asked) and the build."""
        cache = self.cache(stage)
        keys = {uid: key_of(uid) for uid in uids}
        results = {uid: cache.get(uid, keys[uid]) for uid in uids}
        missing = [uid for uid, result in results.items() if result is None]
        results = {uid: result for uid, result in results.items() if result is not None}
        workers = self.chat_config.concurrency if self.chat_config is not None else 1
        counts = {"cached": len(results), "failed": 0, "in_flight": 0}

        def one(uid: str) -> None:
            bar.advance(0, in_flight=1)
            try:
                result = ask(uid)
            except ChatFailure as err:
                with self._lock:
                    state.fail(stage, uid, err.reason)
                bar.advance(failed=1, in_flight=-1)
                return
            except VideoRejected as err:
                result = {"rejected": err.reason}
            with self._lock:
                cache.put(uid, keys[uid], result)
                results[uid] = result
            bar.advance(in_flight=-1)

        with (
            self.progress(stage, len(uids), counts, live=lambda: self.stage_calls(stage), heartbeat=True) as bar,
            ThreadPoolExecutor(max_workers=max(1, min(workers, len(missing) or 1))) as pool,
        ):
            futures = [pool.submit(one, uid) for uid in missing]
            wait(futures, return_when=FIRST_EXCEPTION)  # an EndpointError: the videos not started never start
            pool.shutdown(cancel_futures=True)
        for future in futures:
            if not future.cancelled():
                future.result()
        for uid in [u for u, r in results.items() if isinstance(r, dict) and "rejected" in r]:
            state.remove(stage, uid, "rejected", results.pop(uid)["rejected"])
        return results

    def progress(self, stage: str, total: int, counts: dict[str, int] | None = None, **options: Any) -> Progress:
        """A stage's progress over its videos (`counts["cached"]` of them done before it starts)."""
        counts = counts or {}
        label = f"build-melon {stage}"
        shard = (self.shard, self.shards)
        return Progress(label, total, completed=counts.get("cached", 0), counts=counts, shard=shard, **options)

    def stage_calls(self, stage: str) -> dict[str, int]:
        """This process's LLM calls of `stage` so far and the attempts that were retried."""
        with self._lock:
            totals = [client.stats.stage_totals for client in self._clients.values()]
        return {
            "llm_calls": sum(t["calls", stage] for t in totals),
            "retried": sum(t["retries", stage] for t in totals),
        }

    def v2t_thresholds(self) -> dict[str, float]:
        """Each source's V2T threshold (its own, else `v2t.threshold`)."""
        default = self.config.v2t.threshold
        return {s.name: default if s.v2t_threshold is None else s.v2t_threshold for s in self.config.sources}

    def chat_summary(self) -> dict[str, Any]:
        """This process's LLM calls, cache hits, retries and failures per stage (`ChatStats.summary`)."""
        out: dict[str, Any] = {}
        for client in self._clients.values():
            out.update(client.stats.summary())
        return out

    # ------------------------------------------------------------------ stages
    def collect(self, everything: bool) -> BuildState:
        videos, removed, counts = collect(self.config.sources, self.config.collect)
        state = BuildState({}, counts)
        state.removals = [{"stage": "collect", **asdict(r)} for r in removed]
        for video in videos:
            if everything or shard_of(video.uid, self.shards) == self.shard:
                state.videos[video.uid] = video
        return state

    def qa_to_caption(self, state: BuildState) -> None:
        uids = [uid for uid, v in state.videos.items() if v.qa]

        def key_of(uid: str) -> str:
            return stage_key("qa-to-caption", state.videos[uid].to_json(), self.llm_identity())

        def ask(uid: str) -> Any:
            qa = [asdict(q) for q in state.videos[uid].qa]
            return llm_stages.qa_to_captions(self.client(), uid, qa, self.settings)

        results = self._llm_stage("qa-to-caption", state, uids, key_of, ask)
        for uid, segments in results.items():
            state.videos[uid] = replace(state.videos[uid], segments=tuple(Segment(**s) for s in segments), qa=())

    def t2t(self, state: BuildState) -> None:
        t2t = self.config.t2t
        identity = [t2t.model, tree_identity(resolve_model_path(t2t.model))]
        cache = self.cache("t2t")
        encoder: SentenceEncoder | None = None
        with self.progress("t2t", len(state.videos)) as bar:
            for uid in bar.track(list(state.videos)):
                texts = [s.text for s in state.videos[uid].segments]
                key = stage_key("t2t", texts, identity)
                similarities = cache.get(uid, key)
                if similarities is None:
                    encoder = encoder or sentence_encoder(t2t.model, t2t.batch_size)
                    similarities = encoder.adjacent_similarities(texts)
                    cache.put(uid, key, similarities)
                pairs = redundant_pairs(similarities, t2t.threshold)
                if pairs:
                    detail = "; ".join(f"segments {i}, {i + 1}: {s:.3f} > {t2t.threshold:g}" for i, s in pairs)
                    state.remove("t2t", uid, "redundant_adjacent_descriptions", detail)

    def v2t(self, state: BuildState) -> None:
        v2t = self.config.v2t
        thresholds = self.v2t_thresholds()
        identity = v2t_identity(v2t)
        cache = self.cache("v2t")
        embedder = None
        with self.progress("v2t", len(state.videos)) as bar:
            for uid in bar.track(list(state.videos)):
                video = state.videos[uid]
                key = stage_key(
                    "v2t", video.path, file_version(video.path), [asdict(s) for s in video.segments], identity
                )
                result = cache.get(uid, key)
                if result is None:
                    embedder = embedder or load_embedder(v2t)
                    try:
                        result = {
                            "similarities": segment_similarities(embedder, video.path, video.segments, v2t.batch_size)
                        }
                    except VideoDecodeError as err:
                        result = {"error": err.reason}
                    cache.put(uid, key, result)
                if "error" in result:
                    state.remove("v2t", uid, "undecodable_video", result["error"])
                    continue
                threshold = thresholds[video.source]
                scores = result["similarities"]
                state.v2t_scores[video.source] += scores
                kept = tuple(s for s, score in zip(video.segments, scores) if score >= threshold)
                state.segment_removals[("v2t", video.source)] += len(video.segments) - len(kept)
                if len(kept) < self.settings.min_events:
                    needed = self.settings.min_events
                    detail = f"{len(kept)} of {len(video.segments)} segments >= {threshold:g}; {needed} needed"
                    state.remove("v2t", uid, "too_few_aligned_segments", detail)
                else:
                    state.videos[uid] = replace(video, segments=kept)

    def summarise(self, state: BuildState) -> None:
        def key_of(uid: str) -> str:
            video = state.videos[uid]
            segments = [asdict(x) for x in video.segments]
            return stage_key("summarise", video.duration, segments, self.llm_identity())

        def ask(uid: str) -> Any:
            video = state.videos[uid]
            client = self.client() if self.chat_config is not None else None
            segments = [asdict(x) for x in video.segments]
            return llm_stages.summarise_events(client, uid, video.duration, segments, self.settings)

        state.events.update(self._llm_stage("summarise", state, list(state.videos), key_of, ask))
        for uid in state.videos:
            state.splits[uid] = split_of(uid, self.config.split.test_fraction, self.config.split.seed)

    def judge(self, state: BuildState) -> None:
        if not self.config.judge or self.endpoints["judge"] is None:
            return
        uids = [uid for uid in state.videos if state.splits[uid] == "test"]

        def key_of(uid: str) -> str:
            video = state.videos[uid]
            return stage_key(
                "judge", video.path, file_version(video.path), state.events[uid], self.llm_identity("judge")
            )

        def ask(uid: str) -> Any:
            video, events = state.videos[uid], state.events[uid]
            try:
                frames = [event_frames(video.path, e, self.settings.judge_frames) for e in events]
            except VideoDecodeError as err:
                raise VideoRejected(uid, f"frames for the judge: {err.reason}") from None
            return llm_stages.judge_events(self.client("judge"), uid, frames, events, self.settings)

        state.verdicts.update(self._llm_stage("judge", state, uids, key_of, ask))

    def write(self, state: BuildState) -> list[dict]:
        """The test split's review (supp. C.3: flagged events wait for a person's decision in
        OUT/review.jsonl; decisions already made survive a re-run), then the annotation and the
        statistics page; the written records."""
        review = self.out / "review.jsonl"
        rows = [
            row
            for uid in sorted(state.verdicts)
            if uid in state.videos
            for row in llm_stages.review_rows(uid, state.events[uid], state.verdicts[uid])
        ]
        if rows or review.exists():
            previous = llm_stages.read_review(review) if review.exists() else []
            rows = llm_stages.merge_review(rows, previous)
            llm_stages.write_review(review, rows)
            test = {uid: state.events[uid] for uid in state.verdicts if uid in state.videos}
            kept, dropped = llm_stages.apply_review(
                review, llm_stages.read_review(review), test, self.settings.min_events
            )
            state.events.update(kept)
            for uid, reason in sorted(dropped.items()):
                state.remove("judge", uid, "review", reason)
        records = [
            report.melon_record(uid, v.path, v.duration, state.splits[uid], state.events[uid], self.config.video_root)
            for uid, v in sorted(state.videos.items())
        ]
        dump(self.out / "annotations.json", {"videos": records})
        stats = report.statistics(records, state, self.v2t_thresholds(), self.llm_calls(), self.chat_summary())
        report.write_page(self.out, stats, state, records, STAGES)
        return records

    # ------------------------------------------------------------------ driver
    def run(self, last: str = "write") -> BuildState:
        """Every stage up to and including `last` (earlier ones from their caches where done).
        `write` needs every video, so it reads all shards."""
        order = STAGES[: STAGES.index(last) + 1]
        state = self.collect(everything="write" in order)
        steps = {
            "qa-to-caption": self.qa_to_caption,
            "t2t": self.t2t,
            "v2t": self.v2t,
            "summarise": self.summarise,
            "judge": self.judge,
        }
        try:
            for stage in order[1:]:
                if stage in steps:
                    log.info("build-melon: stage %s over %d videos", stage, len(state.videos))
                    steps[stage](state)
            if "write" in order:
                self.write(state)
        finally:
            for client in self._clients.values():
                client.close()
        return state


def event_frames(path: str, event: dict, count: int, size: int = 224) -> list[bytes]:
    """`count` frames (PNG) at the bin centres of `event`'s interval, for the LMM judge."""
    sample = sample_video(path, SamplingSpec(count, size), event["start"], event["end"])
    out = []
    for frame in sample.frames[sample.mask]:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="PNG")
        out.append(buffer.getvalue())
    return out


def dump(path: Path, payload: Any) -> None:
    """Write JSON atomically (each process its own temporary file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(payload, indent=1), encoding="utf-8")
    tmp.replace(path)
