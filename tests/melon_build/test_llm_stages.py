"""The LLM/LMM stages of build-melon (qa-to-caption, summarise and its fallback, judge and the review
file) against the fake endpoint on 127.0.0.1; the fallback's grouping and the review's outcome are
worked out by hand."""

from __future__ import annotations

import io
import json

import pytest
from helpers.melon_build_endpoint import FakeChatEndpoint, Reply, image_urls, melon_responder, message_texts
from PIL import Image

from lit_retrieval.errors import ConfigError, InputError
from lit_retrieval.melon_build.chat import ChatClient, ChatEndpointConfig, ChatFailure
from lit_retrieval.melon_build.llm_stages import (
    METHOD_FALLBACK,
    METHOD_LLM,
    LlmStageSettings,
    ReviewError,
    VideoRejected,
    apply_review,
    judge_events,
    merge_review,
    qa_to_captions,
    read_review,
    review_rows,
    summarise_events,
    write_review,
)
from lit_retrieval.melon_build.prompts import PromptTemplates

SETTINGS = LlmStageSettings()
QA = [
    {"start": 0.0, "end": 40.0, "question": "What does the cook cut?", "answer": "an onion"},
    {"start": 40.0, "end": 95.5, "question": "Is the pan hot?", "answer": "yes"},
    {"start": 95.5, "end": 150.0, "question": "What is added last?", "answer": "basil"},
]


def segments(n: int, length: float = 10.0, step: float = 10.0) -> list[dict]:
    return [{"start": i * step, "end": i * step + length, "text": f"step {i}"} for i in range(n)]


def client_for(server: FakeChatEndpoint, cache, **overrides) -> ChatClient:
    values = {"url": server.url, "model": "fake", "backoff_s": 0.001, "max_retries": 2}
    return ChatClient(ChatEndpointConfig(**{**values, **overrides}), cache)


def image(colour: tuple[int, int, int], fmt: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), colour).save(out, format=fmt)
    return out.getvalue()


def test_qa_pairs_become_captions_one_call_each_then_cached(tmp_path):
    with FakeChatEndpoint(melon_responder()) as server:
        with client_for(server, tmp_path) as client:
            captions = qa_to_captions(client, "qa/q1", QA, SETTINGS)
            assert client.stats.summary()["qa-to-caption"]["calls_per_video"] == 3.0
        assert captions == [
            {"start": 0.0, "end": 40.0, "text": "an onion, asked: What does the cook cut?"},
            {"start": 40.0, "end": 95.5, "text": "yes, asked: Is the pan hot?"},
            {"start": 95.5, "end": 150.0, "text": "basil, asked: What is added last?"},
        ]
        system, user = next(message_texts(r) for r in server.requests if "pan" in message_texts(r)[1])
        assert "yes/no" in system.lower() and user == "Interval: 40 s to 95.5 s\nQuestion: Is the pan hot?\nAnswer: yes"
        with client_for(server, tmp_path) as client:  # resumed: no call repeated
            assert qa_to_captions(client, "qa/q1", QA, SETTINGS) == captions
            assert client.stats.summary()["qa-to-caption"]["cache_hits"] == 3
        assert len(server.requests) == 3


def test_summary_events_come_back_in_time_order_with_their_method(tmp_path):
    answer = {
        "events": [
            {"theme": "Serving", "description": "The dish is served. ", "start": 100, "end": 150},
            {"theme": "Prep", "description": "Vegetables are cut.", "start": 0, "end": 50},
            {"theme": "Cooking", "description": "Onions fry in a pan.", "start": 50, "end": 100},
        ]
    }
    with FakeChatEndpoint(lambda body: answer) as server:
        with client_for(server, tmp_path) as client:
            events = summarise_events(client, "v1", 150.0, segments(6, 25, 25), SETTINGS)
    assert [(e["theme"], e["start"], e["end"], e["method"]) for e in events] == [
        ("Prep", 0, 50, METHOD_LLM),
        ("Cooking", 50, 100, METHOD_LLM),
        ("Serving", 100, 150, METHOD_LLM),
    ]
    assert events[2]["description"] == "The dish is served."
    system, user = message_texts(server.requests[0])
    assert "between 3 and 5 events" in system and "0 to 150 s" in system
    assert user.splitlines()[2:4] == ["[0-25] step 0", "[25-50] step 1"]


@pytest.mark.parametrize(
    "bad, reason",
    [
        ([(0, 50), (50, 100)], "schema"),  # K = 2 < 3
        ([(0, 20), (20, 40), (40, 60), (60, 80), (80, 100), (100, 120)], "schema"),  # K = 6 > 5
        ([(0, 60), (50, 100), (100, 150)], "check"),  # overlap
        ([(0, 50), (50, 100), (100, 151)], "check"),  # past the video's end (150 s)
        ([(0, 50), (50, 50), (100, 150)], "check"),  # an empty interval
    ],
)
def test_a_summary_that_breaks_the_rules_is_retried(tmp_path, bad, reason):
    def events(spans):
        return {
            "events": [{"theme": "t", "description": f"d{i}", "start": s, "end": e} for i, (s, e) in enumerate(spans)]
        }

    with FakeChatEndpoint(lambda body: events([(0, 50), (50, 100), (100, 150)])) as server:
        server.script("step 0", Reply(content=events(bad)))
        with client_for(server, tmp_path) as client:
            result = summarise_events(client, "v1", 150.0, segments(6, 25, 25), SETTINGS)
            assert client.stats.summary()["summarise"]["retries"] == {reason: 1}
        assert [(e["start"], e["end"]) for e in result] == [(0, 50), (50, 100), (100, 150)]
        server.script("step 0", *[Reply(content=events(bad))] * 3)
        with client_for(server, tmp_path / "fresh") as client:
            with pytest.raises(ChatFailure, match=f"summarise: video v1: no valid answer after 3 attempt.*{reason}"):
                summarise_events(client, "v1", 150.0, segments(6, 25, 25), SETTINGS)


def test_small_rounding_at_the_edges_is_clamped(tmp_path):
    answer = {
        "events": [
            {"theme": "a", "description": "a", "start": 0, "end": 50.03},
            {"theme": "b", "description": "b", "start": 50, "end": 100},
            {"theme": "c", "description": "c", "start": 100, "end": 125.37},
        ]
    }
    with FakeChatEndpoint(lambda body: answer) as server:
        with client_for(server, tmp_path) as client:
            events = summarise_events(client, "v1", 125.345, segments(5, 25, 25), SETTINGS)
    assert [(e["start"], e["end"]) for e in events] == [(0, 50), (50, 100), (100, 125.345)]


def test_fallback_groups_adjacent_segments_by_the_stated_rule():
    # 10 segments -> K = clamp(ceil(10 / 3), 3, 5) = 4 runs of 3, 3, 2, 2 segments
    events = summarise_events(None, "v1", 200.0, segments(10, 12, 10), SETTINGS)
    assert [(e["start"], e["end"]) for e in events] == [(0, 30), (30, 60), (60, 80), (80, 102)]
    assert [e["description"] for e in events] == [
        "step 0 step 1 step 2",
        "step 3 step 4 step 5",
        "step 6 step 7",
        "step 8 step 9",
    ]
    assert all(e["method"] == METHOD_FALLBACK and e["theme"] == "" for e in events)
    # 4 segments -> K = 3 (runs of 2, 1, 1); input order does not matter; the end is clipped to the video
    four = [
        {"start": 30, "end": 70, "text": "c"},
        {"start": 0, "end": 20, "text": " a\n"},
        {"start": 90, "end": 130, "text": "d"},
    ]
    four.append({"start": 10, "end": 30, "text": "b"})
    assert [(e["start"], e["end"], e["description"]) for e in summarise_events(None, "v", 120, four, SETTINGS)] == [
        (0, 30, "a b"),
        (30, 70, "c"),
        (90, 120, "d"),
    ]
    # 16 segments -> ceil(16 / 3) = 6, clamped to 5 runs of 4, 3, 3, 3, 3
    assert [len(e["description"].split()) // 2 for e in summarise_events(None, "v", 300, segments(16), SETTINGS)] == [
        4,
        3,
        3,
        3,
        3,
    ]
    custom = LlmStageSettings(min_events=2, max_events=4, segments_per_fallback_event=2)
    assert len(summarise_events(None, "v", 300, segments(5), custom)) == 3  # ceil(5 / 2)


def test_too_few_segments_or_unsplittable_segments_reject_the_video():
    with pytest.raises(VideoRejected, match="video v1: 2 segment\\(s\\) left, fewer than min_events=3"):
        summarise_events(None, "v1", 200.0, segments(2), SETTINGS)
    same_start = [{"start": 0, "end": 10 + i, "text": f"t{i}"} for i in range(3)]
    with pytest.raises(VideoRejected, match="empty interval"):
        summarise_events(None, "v2", 200.0, same_start, SETTINGS)


def test_judge_sends_each_events_frames_after_its_text_and_flags_mismatches(tmp_path):
    events = [
        {"theme": "Prep", "description": "A cook cuts onions.", "start": 0, "end": 40},
        {"theme": "Fry", "description": "An UNSEEN dragon fries them.", "start": 40, "end": 90},
        {"theme": "Serve", "description": "The dish is served.", "start": 90, "end": 150},
    ]
    frames = [[image((255, 0, 0), "PNG"), image((0, 255, 0), "JPEG")] for _ in events]
    with FakeChatEndpoint(melon_responder()) as server:
        with client_for(server, tmp_path) as client:
            verdicts = judge_events(client, "qa/q1", frames, events, SETTINGS)
            assert client.stats.summary()["judge"]["calls_per_video"] == 1.0
    assert [(v["index"], v["consistent"]) for v in verdicts] == [(0, True), (1, False), (2, True)]
    assert "UNSEEN" in verdicts[1]["reason"]
    parts = server.requests[0]["messages"][1]["content"]
    kinds = [p["type"] if p["type"] == "image_url" else p["text"].split(":")[0] for p in parts]
    assert kinds == ["The video has 3 events. Each event's frames follow its text."] + [
        "Event 0",
        "image_url",
        "image_url",
    ] + [
        "Event 1",
        "image_url",
        "image_url",
    ] + ["Event 2", "image_url", "image_url"]
    assert parts[4]["text"] == "Event 1: [40-90] s. Theme: Fry. Description: An UNSEEN dragon fries them."
    assert len(image_urls(server.requests[0])) == 6
    with pytest.raises(ValueError, match="at least one frame"):
        judge_events(client, "v", [[], [], []], events, SETTINGS)


def test_judge_answer_must_cover_every_event_once(tmp_path):
    good = {"events": [{"index": i, "consistent": True, "reason": "matches"} for i in range(3)]}
    twice = {"events": [{"index": i, "consistent": True, "reason": "matches"} for i in (0, 1, 1)]}
    events = [{"description": f"d{i}", "start": 10 * i, "end": 10 * i + 10} for i in range(3)]
    with FakeChatEndpoint(lambda body: good) as server:
        server.script("d0", Reply(content=twice))
        with client_for(server, tmp_path) as client:
            verdicts = judge_events(client, "v", [[image((0, 0, 0), "PNG")]] * 3, events, SETTINGS)
            assert client.stats.summary()["judge"]["retries"] == {"check": 1}
    assert [v["suggestion"] for v in verdicts] == ["", "", ""]


EVENTS = {
    "a": [
        {"theme": f"t{i}", "description": f"a{i}", "start": 10.0 * i, "end": 10.0 * i + 10, "method": METHOD_LLM}
        for i in range(4)
    ],
    "b": [
        {"theme": f"t{i}", "description": f"b{i}", "start": 20.0 * i, "end": 20.0 * i + 20, "method": METHOD_LLM}
        for i in range(3)
    ],
    "c": [
        {"theme": f"t{i}", "description": f"c{i}", "start": 5.0 * i, "end": 5.0 * i + 5, "method": METHOD_LLM}
        for i in range(3)
    ],
}


def flagged(video: str, *indices: int) -> list[dict]:
    verdicts = [
        {"index": i, "consistent": i not in indices, "reason": "r", "suggestion": "s"}
        for i in range(len(EVENTS[video]))
    ]
    return review_rows(video, EVENTS[video], verdicts)


def test_review_file_round_trip_and_outcome(tmp_path):
    path = tmp_path / "review.jsonl"
    write_review(path, flagged("a", 1, 3) + flagged("b", 2))
    lines = path.read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0]) == {
        "video_id": "a",
        "index": 1,
        "start": 10.0,
        "end": 20.0,
        "theme": "t1",
        "description": "a1",
        "reason": "r",
        "suggestion": "s",
        "decision": "pending",
    }
    with pytest.raises(ReviewError, match=r"review.jsonl: line 1: 3 flagged event\(s\) still pending"):
        apply_review(path, read_review(path), EVENTS, 3)
    # a person: rejects a1, accepts a3 with a corrected description, rejects b2
    rows = [json.loads(line) for line in lines]
    rows[0]["decision"] = "reject"
    rows[1].update(decision="accept", description="a3, corrected")
    rows[2]["decision"] = "reject"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    kept, dropped = apply_review(path, read_review(path), EVENTS, 3)
    assert [e["description"] for e in kept["a"]] == ["a0", "a2", "a3, corrected"]  # 3 left: kept
    assert "b" not in kept and dropped == {"b": "2 event(s) left after review, fewer than min_events=3"}
    assert kept["c"] == EVENTS["c"]  # not flagged: unchanged
    assert EVENTS["a"][3]["description"] == "a3"  # the input is not modified


def test_rerunning_the_judge_keeps_decisions_made(tmp_path):
    previous = flagged("a", 1, 3)
    previous[0]["decision"] = "reject"
    previous[1].update(decision="accept", description="fixed")
    merged = merge_review(flagged("a", 1, 2, 3), previous)
    assert [(r["index"], r["decision"], r["description"]) for r in merged] == [
        (1, "reject", "a1"),
        (2, "pending", "a2"),
        (3, "accept", "fixed"),
    ]


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 2: not valid JSON"),
        ('["a", 1]', "line 2: not a JSON object"),
        ('{"video_id": "a", "index": 2}', "line 2: missing field\\(s\\) \\['start'"),
        ("ROW decision=maybe", "line 2: decision must be one of \\['pending', 'accept', 'reject'\\], got 'maybe'"),
        ("ROW index=x", "line 2: index must be an integer >= 0, got 'x'"),
        ("ROW start=ten", "line 2: start must be a number"),
        ("ROW description=", "line 2: description is empty"),
        ("ROW index=1", "line 2: video a event 1 again \\(first on line 1\\)"),
    ],
)
def test_malformed_review_rows_are_refused_naming_the_line(tmp_path, line, message):
    first, second = flagged("a", 1, 2)
    if line.startswith("ROW"):
        name, value = line[4:].split("=")
        try:
            second[name] = json.loads(value)  # index=1 -> 1
        except ValueError:
            second[name] = value  # decision=maybe -> "maybe"
        line = json.dumps(second)
    path = tmp_path / "review.jsonl"
    path.write_text(json.dumps(first) + "\n" + line + "\n")
    with pytest.raises(ReviewError, match=f"review.jsonl: {message}") as error:
        read_review(path)
    assert isinstance(error.value, InputError) and "\n" not in str(error.value)


def test_review_rows_must_match_the_current_summary(tmp_path):
    rows = flagged("a", 1)
    rows[0].update(decision="accept", start=11.0)
    path = tmp_path / "review.jsonl"
    write_review(path, rows)
    with pytest.raises(ReviewError, match="line 1: interval \\[11, 20\\] differs from the summary's \\[10, 20\\]"):
        apply_review(path, read_review(path), EVENTS, 3)
    rows[0].update(video_id="gone", start=10.0)
    write_review(path, rows)
    with pytest.raises(ReviewError, match="line 1: no event 1 of video gone"):
        apply_review(path, read_review(path), EVENTS, 3)


def test_prompt_overrides_are_used_and_checked(tmp_path):
    prompts = PromptTemplates(qa_to_caption_user="Q=$question A=$answer ($start-$end) costs $$5")
    with FakeChatEndpoint(lambda body: {"caption": "c"}) as server:
        with client_for(server, tmp_path) as client:
            qa_to_captions(client, "v", QA[:1], LlmStageSettings(prompts=prompts))
    assert message_texts(server.requests[0])[1] == "Q=What does the cook cut? A=an onion (0-40) costs $5"
    with pytest.raises(ConfigError, match="prompts.summarise_user uses unknown placeholder\\(s\\) \\['video'\\]"):
        PromptTemplates(summarise_user="$segments of $video")
    with pytest.raises(
        ConfigError, match="prompts.judge_event must contain the placeholder\\(s\\) \\['description'\\]"
    ):
        PromptTemplates(judge_event="Event $index")
    with pytest.raises(ConfigError, match="prompts.qa_to_caption_user: a '\\$' not followed"):
        PromptTemplates(qa_to_caption_user="$question $answer costs $5")


@pytest.mark.parametrize(
    "overrides, message",
    [({"min_events": 0}, "llm.min_events"), ({"min_events": 4, "max_events": 3}, "llm.max_events \\(3\\) must be >=")],
)
def test_bad_stage_settings_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        LlmStageSettings(**overrides)
