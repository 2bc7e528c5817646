"""A fake OpenAI-compatible chat-completions server on 127.0.0.1 for the build-melon tests: a real HTTP
server (http.server, one thread per request) that the test starts, answering POST
`/v1/chat/completions` through a `responder` and recording every request.

    with FakeChatEndpoint(melon_responder()) as server:
        config = ChatEndpointConfig(url=server.url, model="fake", backoff_s=0.001)
        ...
        server.requests      # the parsed request bodies, in arrival order
        server.in_flight     # the requests it is answering now
        server.max_in_flight # the most requests it was answering at once

Faults are injected with `server.script(marker, *replies)`: the next requests whose text contains
`marker` get `replies` in turn (a `Reply` with a status and headers, a delay longer than the client's
timeout, a malformed or schema-violating content, a truncated answer), then the responder answers.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass
class Reply:
    """One answer of the fake: `content` (a dict is sent as its JSON text) with HTTP `status` and
    `headers`, after `delay_s`; `raw_body` replaces the whole chat-completions body."""

    content: str | dict | None = None
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    finish_reason: str = "stop"
    raw_body: str | None = None


Responder = Callable[[dict[str, Any]], "Reply | dict | str"]


def message_texts(body: dict[str, Any]) -> list[str]:
    """The text of every message of a request (text parts of multimodal messages joined by newlines)."""
    texts = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            content = "\n".join(part["text"] for part in content if part["type"] == "text")
        texts.append(content)
    return texts


def image_urls(body: dict[str, Any]) -> list[str]:
    """The image data URIs of a request, in order."""
    return [
        part["image_url"]["url"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


class FakeChatEndpoint:
    """The server; `hold_s` keeps every request in flight that long (to observe concurrency); `port`
    0 takes a free one (give one that a closed server used to restart it there)."""

    def __init__(self, responder: Responder, hold_s: float = 0.0, port: int = 0) -> None:
        self.responder = responder
        self.hold_s = hold_s
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.arrivals: list[float] = []
        self.max_in_flight = 0
        self._in_flight = 0
        self._scripts: list[tuple[str, list[Reply]]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def in_flight(self) -> int:
        """How many requests it is answering now (held, not yet answered)."""
        with self._lock:
            return self._in_flight

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakeChatEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def script(self, marker: str, *replies: Reply) -> None:
        """The next requests containing `marker` get `replies`, one each, before the responder."""
        with self._lock:
            self._scripts.append((marker, list(replies)))

    def _reply(self, body: dict[str, Any]) -> Reply:
        text = "\n".join(message_texts(body))
        with self._lock:
            for marker, replies in self._scripts:
                if marker in text and replies:
                    return replies.pop(0)
        answer = self.responder(body)
        return answer if isinstance(answer, Reply) else Reply(content=answer)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with endpoint._lock:
                    endpoint.requests.append(body)
                    endpoint.headers.append(dict(self.headers))
                    endpoint.arrivals.append(time.monotonic())
                    endpoint._in_flight += 1
                    endpoint.max_in_flight = max(endpoint.max_in_flight, endpoint._in_flight)
                answering = True
                try:
                    reply = endpoint._reply(body) if self.path == "/v1/chat/completions" else Reply(status=404)
                    time.sleep(endpoint.hold_s + reply.delay_s)
                    # done before the answer leaves: once the client has it, it may send its next request
                    # before this thread runs again
                    with endpoint._lock:
                        endpoint._in_flight -= 1
                    answering = False
                    self._send(reply, body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (an injected timeout)
                    pass
                finally:
                    if answering:
                        with endpoint._lock:
                            endpoint._in_flight -= 1

            def _send(self, reply: Reply, body: dict[str, Any]) -> None:
                if reply.raw_body is not None:
                    payload = reply.raw_body
                elif reply.status != 200:
                    payload = json.dumps({"error": {"message": f"fake error {reply.status}"}})
                else:
                    content = json.dumps(reply.content) if isinstance(reply.content, dict) else reply.content
                    message = {"role": "assistant", "content": content}
                    choice = {"index": 0, "message": message, "finish_reason": reply.finish_reason}
                    payload = json.dumps(
                        {"id": "fake", "object": "chat.completion", "model": body["model"], "choices": [choice]}
                    )
                data = payload.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        return Handler


_QA = re.compile(r"^Question: (.*)$\n^Answer: (.*)$", re.MULTILINE)
_SEGMENT = re.compile(r"^\[([0-9.]+)-([0-9.]+)\] (.*)$", re.MULTILINE)
_EVENT = re.compile(r"^Event (\d+): .*Description: (.*)$", re.MULTILINE)


def melon_responder(flag_word: str = "UNSEEN") -> Responder:
    """Deterministic answers to the default prompts of the three stages, computed from the prompt:

    - qa-to-caption (a "Question:"/"Answer:" pair): caption "<answer>, asked: <question>";
    - summarise ("[start-end] text" lines): K = 3 events for fewer than 8 segments, else 4; the
      segments cut into K adjacent runs of equal count (the first n mod K one longer), each event
      spanning its run (ending where the next starts if they overlap), theme "Part k", description
      "Summary: " + the run's texts joined by " / ";
    - judge (a request with images, "Event i: ... Description: d" parts): an event is inconsistent
      exactly when its description contains `flag_word`.
    """

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        text = "\n".join(message_texts(body))
        if image_urls(body):
            return {
                "events": [
                    {
                        "index": int(index),
                        "consistent": flag_word not in description,
                        "reason": f"{flag_word} is not in the frames" if flag_word in description else "matches",
                        "suggestion": "",
                    }
                    for index, description in _EVENT.findall(text)
                ]
            }
        qa = _QA.search(text)
        if qa:
            return {"caption": f"{qa.group(2)}, asked: {qa.group(1)}"}
        segments = [(float(s), float(e), t) for s, e, t in _SEGMENT.findall(text)]
        k = 3 if len(segments) < 8 else 4
        base, longer = divmod(len(segments), k)
        events, first = [], 0
        for number, size in enumerate([base + 1] * longer + [base] * (k - longer), 1):
            run = segments[first : first + size]
            first += size
            events.append(
                {
                    "theme": f"Part {number}",
                    "description": "Summary: " + " / ".join(t for _, _, t in run),
                    "start": min(s for s, _, _ in run),
                    "end": max(e for _, e, _ in run),
                }
            )
        for event, following in zip(events, events[1:]):
            event["end"] = min(event["end"], following["start"])
        return {"events": events}

    return respond
