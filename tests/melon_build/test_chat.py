"""The chat-completions client of build-melon against a fake endpoint on 127.0.0.1 (a real HTTP
server): cache, retries and backoff, Retry-After, schema checks, failures, concurrency, images, keys."""

from __future__ import annotations

import base64
import json
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate

import pytest
from helpers.melon_build_endpoint import FakeChatEndpoint, Reply, image_urls, message_texts

from lit_retrieval.errors import ConfigError
from lit_retrieval.melon_build.chat import (
    CallLog,
    ChatClient,
    ChatEndpointConfig,
    ChatFailure,
    EndpointError,
    RequestKey,
    answer_text,
    image_part,
    logged_calls,
    retry_after_seconds,
)

SCHEMA = {
    "type": "object",
    "properties": {"word": {"type": "string"}, "count": {"type": "integer", "minimum": 0}},
    "required": ["word", "count"],
}
KEY = RequestKey("summarise", "vid1")


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "Answer with JSON."}, {"role": "user", "content": text}]


def echo(body: dict) -> dict:
    """Answers {"word": last word of the user's text, "count": its number of words}."""
    words = message_texts(body)[1].split()
    return {"word": words[-1], "count": len(words)}


def config(server: FakeChatEndpoint, **overrides) -> ChatEndpointConfig:
    values = {"url": server.url, "model": "fake-qwen", "backoff_s": 0.001, "max_retries": 2, "timeout_s": 5.0}
    return ChatEndpointConfig(**{**values, **overrides})


def test_answers_are_cached_so_a_second_run_makes_no_call(tmp_path):
    with FakeChatEndpoint(echo) as server:
        with ChatClient(config(server), tmp_path) as client:
            assert client.complete_json(ask("one two three"), SCHEMA, KEY) == {"word": "three", "count": 3}
            assert client.complete_json(ask("four five"), SCHEMA, KEY) == {"word": "five", "count": 2}
        assert len(server.requests) == 2
        with ChatClient(config(server), tmp_path) as again:  # a resumed build: a new client, same cache
            assert again.complete_json(ask("one two three"), SCHEMA, KEY) == {"word": "three", "count": 3}
            assert again.complete_json(ask("four five"), SCHEMA, KEY) == {"word": "five", "count": 2}
            assert again.stats.summary()["summarise"] == {
                "videos": 1,
                "calls": 0,
                "cache_hits": 2,
                "calls_per_video": 0.0,
                "retries": {},
                "failures": 0,
            }
        assert len(server.requests) == 2
        with ChatClient(config(server, temperature=0.7), tmp_path) as other:  # another sampling: another answer
            other.complete_json(ask("one two three"), SCHEMA, KEY)
        assert len(server.requests) == 3
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert len(files) == 3 and all(f.endswith(".json") and f.split("/")[1].startswith(f.split("/")[0]) for f in files)
    stored = json.loads((tmp_path / files[0]).read_text())
    assert stored["model"] == "fake-qwen" and stored["stage"] == "summarise" and stored["video"] == "vid1"


def test_request_body_follows_the_chat_completions_contract(tmp_path):
    with FakeChatEndpoint(echo) as server:
        extra = {"chat_template_kwargs": {"enable_thinking": False}}
        with ChatClient(config(server, max_tokens=77, temperature=0.2, extra_body=extra), tmp_path) as client:
            client.complete_json(ask("a b"), SCHEMA, RequestKey("qa-to-caption", "v", "0"))
        with ChatClient(config(server, response_format="json_object"), tmp_path / "c2") as client:
            client.complete_json(ask("a b"), SCHEMA, KEY)
        with ChatClient(config(server, response_format="none"), tmp_path / "c3") as client:
            client.complete_json(ask("a b"), SCHEMA, KEY)
    first, second, third = server.requests
    assert first["model"] == "fake-qwen" and first["max_tokens"] == 77 and first["temperature"] == 0.2
    assert first["messages"] == ask("a b") and first["chat_template_kwargs"] == {"enable_thinking": False}
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "qa_to_caption", "schema": SCHEMA},
    }
    assert second["response_format"] == {"type": "json_object"}
    assert "response_format" not in third


def test_fences_and_thinking_are_stripped(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("fenced", Reply(content='```json\n{"word": "x", "count": 1}\n```'))
        server.script("thinks", Reply(content='<think>let me see {"word"...}</think>\n{"word": "y", "count": 2}'))
        with ChatClient(config(server), tmp_path) as client:
            assert client.complete_json(ask("fenced"), SCHEMA, KEY) == {"word": "x", "count": 1}
            assert client.complete_json(ask("thinks"), SCHEMA, KEY) == {"word": "y", "count": 2}
            assert client.stats.summary()["summarise"]["retries"] == {}
    assert len(server.requests) == 2
    assert answer_text('```\n{"a": 1}\n```') == '{"a": 1}'
    assert answer_text('Here it is:\n```json\n{"a": 1}\n```\nHope this helps.') == '{"a": 1}'
    assert answer_text('{"a": "no fence"}') == '{"a": "no fence"}'
    assert answer_text('{"a": "code: ```x```"}') == '{"a": "code: ```x```"}'


def test_a_cached_answer_that_breaks_the_current_rules_is_asked_again(tmp_path):
    with FakeChatEndpoint(echo) as server:
        with ChatClient(config(server), tmp_path) as client:
            client.complete_json(ask("one two"), SCHEMA, KEY)
            assert client.complete_json(ask("one two"), SCHEMA, KEY, check=lambda a: None) == {
                "word": "two",
                "count": 2,
            }
            assert len(server.requests) == 1
            stricter = lambda a: None if a["count"] > 2 else "too few words"  # noqa: E731
            with pytest.raises(ChatFailure, match="too few words"):
                client.complete_json(ask("one two"), SCHEMA, KEY, check=stricter)
        assert len(server.requests) == 1 + 3


@pytest.mark.parametrize(
    "bad, reason",
    [
        (Reply(content='{"word": "x", "count": '), "malformed"),  # cut-off JSON
        (Reply(content="[1, 2]"), "malformed"),  # JSON, but not an object
        (Reply(content={"word": "x", "count": -1}), "schema"),  # violates minimum
        (Reply(content={"word": "x"}), "schema"),  # misses a required key
        (Reply(content='{"word": "x", "count": 1', finish_reason="length"), "truncated"),
        (Reply(status=503), "http 503"),
        (Reply(raw_body="<html>bad gateway</html>"), "response"),
    ],
)
def test_a_bad_answer_is_retried_then_the_good_one_is_used(tmp_path, bad, reason):
    with FakeChatEndpoint(echo) as server:
        server.script("please", bad)
        with ChatClient(config(server), tmp_path) as client:
            assert client.complete_json(ask("please count"), SCHEMA, KEY) == {"word": "count", "count": 2}
            summary = client.stats.summary()["summarise"]
    assert len(server.requests) == 2
    assert summary["retries"] == {reason: 1} and summary["calls"] == 2 and summary["failures"] == 0
    if reason in ("malformed", "schema", "truncated"):  # the retry shows the model its answer and what is wrong
        retry = server.requests[1]["messages"]
        assert retry[:2] == ask("please count") and retry[2]["role"] == "assistant"
        assert reason in retry[3]["content"]


def test_a_stage_check_rejects_a_schema_valid_answer(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("three", Reply(content={"word": "wrong", "count": 3}))
        with ChatClient(config(server), tmp_path) as client:
            answer = client.complete_json(
                ask("one two three"), SCHEMA, KEY, check=lambda a: None if a["word"] == "three" else "wrong word"
            )
            assert answer == {"word": "three", "count": 3}
            assert client.stats.summary()["summarise"]["retries"] == {"check": 1}
    assert "check: wrong word" in server.requests[1]["messages"][3]["content"]


def test_chat_failure_after_max_retries_and_nothing_cached(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("doomed", *[Reply(content="not json at all")] * 3)
        with ChatClient(config(server, max_retries=2), tmp_path) as client:
            with pytest.raises(ChatFailure) as failure:
                client.complete_json(ask("doomed"), SCHEMA, RequestKey("qa-to-caption", "vid9", "4"))
            summary = client.stats.summary()["qa-to-caption"]
        assert len(server.requests) == 3  # the first attempt and two retries
        assert summary["retries"] == {"malformed": 2} and summary["failures"] == 1
        assert str(failure.value).startswith("qa-to-caption: video vid9 item 4: no valid answer after 3 attempt(s)")
        assert "malformed" in failure.value.reason
        with ChatClient(config(server), tmp_path) as client:  # a re-run asks again (the fake now answers well)
            assert client.complete_json(ask("doomed"), SCHEMA, KEY) == {"word": "doomed", "count": 1}
        assert len(server.requests) == 4


def test_backoff_grows_exponentially(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("busy", *[Reply(status=502)] * 3)
        with ChatClient(config(server, backoff_s=0.05, max_retries=3), tmp_path) as client:
            client.complete_json(ask("busy"), SCHEMA, KEY)
    gaps = [b - a for a, b in zip(server.arrivals, server.arrivals[1:])]
    # wait n is drawn from [backoff_s * 2**n / 2, backoff_s * 2**n]
    assert len(gaps) == 3 and all(gap >= 0.05 * 2**n / 2 for n, gap in enumerate(gaps))
    assert gaps[2] > gaps[0]


def test_429_waits_for_retry_after(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("limited", Reply(status=429, headers={"Retry-After": "1"}))
        with ChatClient(config(server), tmp_path) as client:
            assert client.complete_json(ask("limited"), SCHEMA, KEY)["word"] == "limited"
            assert client.stats.summary()["summarise"]["retries"] == {"http 429": 1}
    assert server.arrivals[1] - server.arrivals[0] >= 1.0  # backoff_s alone would wait ~1 ms


def test_retry_after_forms():
    assert retry_after_seconds("2") == 2.0 and retry_after_seconds("0.5") == 0.5
    assert retry_after_seconds(None) is None and retry_after_seconds("soon") is None
    assert 8 < retry_after_seconds(formatdate(time.time() + 10, usegmt=True)) <= 10


def test_timeout_is_retried(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("slow", Reply(content={"word": "late", "count": 0}, delay_s=1.0))
        with ChatClient(config(server, timeout_s=0.2), tmp_path) as client:
            assert client.complete_json(ask("slow"), SCHEMA, KEY) == {"word": "slow", "count": 1}
            assert client.stats.summary()["summarise"]["retries"] == {"timeout": 1}


def test_refused_requests_are_not_retried(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("long", Reply(status=400))
        server.script("key", Reply(status=401))
        with ChatClient(config(server), tmp_path) as client:
            with pytest.raises(ChatFailure, match="HTTP 400"):
                client.complete_json(ask("too long"), SCHEMA, KEY)
            assert len(server.requests) == 1
            with pytest.raises(EndpointError, match="HTTP 401 for model 'fake-qwen'"):
                client.complete_json(ask("bad key"), SCHEMA, KEY)
            assert len(server.requests) == 2
            assert client.stats.summary()["summarise"]["failures"] == 1


def test_an_endpoint_nothing_answers_on_stops_the_client_at_once(tmp_path):
    """Nothing listens on the URL and no request has reached it: no retry (the retries and their
    backoff would take minutes here), and the client's later requests stop the same way."""
    with FakeChatEndpoint(echo) as server:
        url = server.url
    cfg = ChatEndpointConfig(url=url, model="m", backoff_s=30, max_retries=4, timeout_s=2)
    with ChatClient(cfg, tmp_path) as client:
        started = time.monotonic()
        with pytest.raises(EndpointError, match=r"cannot connect \(ConnectError.*no request has reached it yet"):
            client.complete_json(ask("anyone"), SCHEMA, KEY)
        with pytest.raises(EndpointError, match="cannot connect"):
            client.complete_json(ask("anyone else"), SCHEMA, KEY)
        assert time.monotonic() - started < 5
        assert client.stats.summary() == {}  # a refused connection is no call


def test_a_connection_lost_after_an_answer_is_retried_then_stops_the_client(tmp_path):
    """The server answered, then is gone: the request is retried (a restart would be survived); when its
    last attempt still finds nothing listening, the client stops, so later requests are not each retried."""
    log = CallLog(tmp_path / "llm-calls" / "shard-0-of-1.jsonl")
    with FakeChatEndpoint(echo) as server:
        client = ChatClient(config(server, max_retries=1), tmp_path / "cache", call_log=log)
        assert client.complete_json(ask("first"), SCHEMA, KEY)["word"] == "first"
    gone = r"stopped accepting connections \(summarise: video vid1: connection: ConnectError.*after 2 attempt"
    with client, pytest.raises(EndpointError, match=gone):
        client.complete_json(ask("the server has gone"), SCHEMA, KEY)
    with pytest.raises(EndpointError, match="stopped accepting connections"):
        client.complete_json(ask("and the next request"), SCHEMA, RequestKey("summarise", "vid2"))
    summary = client.stats.summary()["summarise"]
    assert summary["retries"] == {"connection": 1} and summary["calls"] == 1
    assert logged_calls(log.path.parent) == {("summarise", "vid1"): 1}  # the log counts as the server did


def test_a_server_back_within_the_retries_is_not_given_up(tmp_path):
    """A connection refused after the server was reached, then the server listening again on the same
    port before the retry (a restart): the request is answered."""
    with FakeChatEndpoint(echo) as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        client = ChatClient(config(server, max_retries=2, backoff_s=1.0), tmp_path)
        assert client.complete_json(ask("first"), SCHEMA, KEY)["word"] == "first"
    restarted: list[FakeChatEndpoint] = []

    def restart() -> None:  # after the first attempt was refused, during its backoff (0.5-1 s)
        while not client.stats.summary().get("summarise", {}).get("retries"):
            time.sleep(0.01)
        restarted.append(FakeChatEndpoint(echo, port=int(port)).__enter__())

    with ThreadPoolExecutor(1) as pool, client:
        pending = pool.submit(restart)
        assert client.complete_json(ask("second try"), SCHEMA, KEY)["word"] == "try"
        pending.result()
    restarted[0].__exit__()
    assert client.stats.summary()["summarise"]["retries"] == {"connection": 1}


def test_every_request_is_in_the_call_log_before_the_server_has_it(tmp_path):
    """The server reads the call log as each request arrives: the request's own line is already on disk,
    so a process killed while the server holds requests (SIGKILL, no handler runs) hides none of them."""
    log = CallLog(tmp_path / "llm-calls" / "shard-0-of-1.jsonl")
    seen_at_arrival: list[int] = []

    def respond(body: dict) -> dict:
        seen_at_arrival.append(sum(logged_calls(log.path.parent).values()))
        return echo(body)

    with FakeChatEndpoint(respond) as server, ChatClient(config(server), tmp_path / "cache", call_log=log) as client:
        for n in range(1, 6):
            client.complete_json(ask(f"question {n}"), SCHEMA, RequestKey("summarise", f"vid{n}"))
    assert seen_at_arrival == [1, 2, 3, 4, 5]
    assert logged_calls(log.path.parent) == {("summarise", f"vid{n}"): 1 for n in range(1, 6)}


def test_a_request_whose_sending_fails_is_logged_back_out(tmp_path):
    """httpcore's trace events (`<protocol>.send_request_headers.started`, `... .failed`): a request
    that breaks while being written was logged before its first byte, then taken back (`calls: -1`)."""
    log = CallLog(tmp_path / "llm-calls" / "shard-0-of-1.jsonl")
    with FakeChatEndpoint(echo) as server, ChatClient(config(server), tmp_path / "cache", call_log=log) as client:
        trace = client._tracer(KEY)
        trace("http11.send_request_headers.started", {})
        trace("http11.send_request_headers.complete", {})
        trace("http11.send_request_body.started", {})
        assert logged_calls(log.path.parent) == {("summarise", "vid1"): 1}
        trace("http11.send_request_body.failed", {"exception": OSError("broken pipe")})
        assert logged_calls(log.path.parent) == {("summarise", "vid1"): 0}
        assert client.stats.summary() == {}  # never sent whole: no call


def test_a_refused_key_stops_the_requests_not_yet_sent(tmp_path):
    """HTTP 401 on the first two requests (in flight together): the six others, waiting for a slot,
    are never sent."""
    with FakeChatEndpoint(lambda body: Reply(status=401), hold_s=0.3) as server:
        with ChatClient(config(server, concurrency=2), tmp_path) as client:
            requests = [(ask(f"item {i}"), SCHEMA, RequestKey("judge", f"v{i}"), None) for i in range(8)]
            with pytest.raises(EndpointError, match="HTTP 401"):
                client.complete_many(requests)
            with pytest.raises(EndpointError, match="HTTP 401"):
                client.complete_json(ask("later"), SCHEMA, KEY)
            assert client.stats.summary()["judge"]["calls"] == 2
    assert len(server.requests) == 2


def test_concurrency_limit_is_respected(tmp_path):
    with FakeChatEndpoint(
        echo, hold_s=0.25
    ) as server:  # a request takes 1/4 of the timeout: no retry on a busy machine
        with ChatClient(config(server, concurrency=3, timeout_s=1.0), tmp_path) as client:
            requests = [(ask(f"item {i}"), SCHEMA, RequestKey("judge", f"v{i % 4}"), None) for i in range(12)]
            answers = client.complete_many(requests)
            assert server.max_in_flight == 3
            # more callers than slots (a runner with its own threads): still 3 at the server, and
            # waiting for a slot is not a timeout (15 requests x 0.25 s / 3 slots > timeout_s)
            with ThreadPoolExecutor(max_workers=15) as callers:
                more = list(callers.map(lambda i: client.complete_json(ask(f"more {i}"), SCHEMA, KEY), range(15)))
            judge, summarise = client.stats.summary()["judge"], client.stats.summary()["summarise"]
    assert [a["word"] for a in answers] == [str(i) for i in range(12)]
    assert [a["word"] for a in more] == [str(i) for i in range(15)]
    assert server.max_in_flight == 3
    assert judge["calls"] == 12 and judge["videos"] == 4 and judge["calls_per_video"] == 3.0
    assert summarise["retries"] == {} and summarise["calls"] == 15


def test_complete_many_finishes_the_batch_before_raising(tmp_path):
    with FakeChatEndpoint(echo) as server:
        server.script("item 1", *[Reply(content="nope")] * 2)
        with ChatClient(config(server, max_retries=1), tmp_path) as client:
            requests = [(ask(f"item {i}"), SCHEMA, RequestKey("qa-to-caption", "v", str(i)), None) for i in range(3)]
            with pytest.raises(ChatFailure, match="item 1"):
                client.complete_many(requests)
        with ChatClient(config(server), tmp_path) as client:
            client.complete_many(requests)
            assert client.stats.summary()["qa-to-caption"]["cache_hits"] == 2  # items 0 and 2 were kept
    assert len(server.requests) == 2 + 2 + 1


def test_images_travel_as_data_uris(tmp_path):
    png = b"\x89PNG\r\n\x1a\n" + b"fake png body"
    jpeg = b"\xff\xd8\xff\xe0" + b"fake jpeg body"
    with FakeChatEndpoint(echo) as server:
        content = [{"type": "text", "text": "look"}, image_part(png), image_part(jpeg)]
        messages = [{"role": "system", "content": "s"}, {"role": "user", "content": content}]
        with ChatClient(config(server), tmp_path) as client:
            assert client.complete_json(messages, SCHEMA, KEY) == {"word": "look", "count": 1}
    urls = image_urls(server.requests[0])
    assert [u.split(",")[0] for u in urls] == ["data:image/png;base64", "data:image/jpeg;base64"]
    assert [base64.b64decode(u.split(",")[1]) for u in urls] == [png, jpeg]
    with pytest.raises(ValueError, match="PNG or JPEG"):
        image_part(b"GIF89a")


def test_api_key_comes_from_the_named_environment_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_CHAT_KEY", "secret-123")
    with FakeChatEndpoint(echo) as server:
        with ChatClient(config(server, api_key_env="FAKE_CHAT_KEY"), tmp_path) as client:
            client.complete_json(ask("a"), SCHEMA, KEY)
        assert server.headers[0]["Authorization"] == "Bearer secret-123"
        monkeypatch.delenv("FAKE_CHAT_KEY")
        with pytest.raises(ConfigError, match="FAKE_CHAT_KEY is not set"):
            ChatClient(config(server, api_key_env="FAKE_CHAT_KEY"), tmp_path)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"url": "node12:8000/v1"}, "chat.url"),
        ({"model": " "}, "chat.model"),
        ({"api_key_env": "sk-abc123"}, "name of an environment variable"),
        ({"max_retries": -1}, "chat.max_retries"),
        ({"concurrency": 0}, "chat.concurrency"),
        ({"timeout_s": 0}, "chat.timeout_s"),
        ({"response_format": "yaml"}, "chat.response_format"),
    ],
)
def test_bad_endpoint_config_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ChatEndpointConfig(**{"url": "http://node12:8000/v1", "model": "Qwen/Qwen3-8B", **overrides})
