"""An OpenAI chat-completions server for checking `build-melon` from the outside, written from the wire
format alone (it shares no code with tests/helpers/melon_build_endpoint.py): `POST /v1/chat/completions` with a
JSON body `{"model", "messages", "response_format", ...}`, answered by
`{"id", "object": "chat.completion", "created", "model", "choices": [{"index", "message": {"role",
"content"}, "finish_reason"}], "usage"}`, errors as an HTTP status with `{"error": {"message", "type",
"code"}}` (429 with `Retry-After`). HTTP/1.1 with keep-alive, as vLLM's and SGLang's servers speak.

Run in its own process, so that a test can SIGKILL it mid-stage:

    python tests/helpers/openai_wire_server.py PLAN.json STATE_DIR

It writes its port to `STATE_DIR/port` once listening, and appends to `STATE_DIR/requests.jsonl` one
line per request it receives, `{"event": "received", "stage", "item", "fault", "t"}`, synced to disk
before it answers (so a kill cannot hide a request it received), and `{"event": "answered", "stage",
"item", "t"}` once a valid answer has been written to the socket (also when the client had stopped
waiting for it: a slow answer past its timeout). `stage` is the request's
`response_format.json_schema.name`, `item` a digest of its first two messages (the system prompt and
the question: the same for every retry of one request, also when a retry appends the bad answer).

PLAN.json maps a stage name to a list of faults given, in turn, to that stage's first requests:
`{"status": 503}` (an error body; `retry_after` adds the header), `{"slow_s": 3}` (answers after that
long; alone, a valid answer), `{"body": "..."}` (200 with that raw body: malformed JSON, or JSON that
is no chat completion), `{"content": "..."}` (200 whose message content is that text). Later requests
get a valid answer, computed from the user message:
- `qa_to_caption`: `{"caption": ANSWER}`, the text of the `Answer:` line;
- `summarise`: the `[start-end] text` segment lines in time order cut at rounded thirds into 3 runs of
  adjacent segments, one event per run (theme `Event k`, the run's texts as its description, from its
  first start to its last end);
- `judge`: every event consistent, one verdict per `Event i:` text part.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

SEGMENT_LINE = re.compile(r"^\[(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)\] (.*)$", re.MULTILINE)
EVENT_PART = re.compile(r"^Event (\d+):", re.MULTILINE)


def user_text(messages: list[dict[str, Any]]) -> str:
    """The text of the first user message (its text parts joined, for a multimodal message: the judge's)."""
    content = next(m["content"] for m in messages if m["role"] == "user")
    if isinstance(content, list):
        return "\n".join(part["text"] for part in content if part.get("type") == "text")
    return content


def answer_for(stage: str, request: dict[str, Any]) -> dict[str, Any]:
    """A valid answer of `stage` to `request` (see the module docstring)."""
    text = user_text(request["messages"])
    if stage == "qa_to_caption":
        return {"caption": re.search(r"^Answer: (.*)$", text, re.MULTILINE).group(1)}
    if stage == "summarise":
        segments = sorted((float(a), float(b), t) for a, b, t in SEGMENT_LINE.findall(text))
        cuts = [round(k * len(segments) / 3) for k in range(4)]
        runs = [segments[a:b] for a, b in zip(cuts, cuts[1:])]
        events = [
            {
                "theme": f"Event {k}",
                "description": " ".join(t for _, _, t in run),
                "start": run[0][0],
                "end": run[-1][1],
            }
            for k, run in enumerate(runs)
        ]
        return {"events": events}
    indices = [int(i) for i in EVENT_PART.findall(text)]
    return {"events": [{"index": i, "consistent": True, "reason": "as shown", "suggestion": ""} for i in indices]}


class WireServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, plan: dict[str, list[dict]], state: Path) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.plan = {stage: list(faults) for stage, faults in plan.items()}
        self.log = (state / "requests.jsonl").open("a", encoding="utf-8")
        self.lock = threading.Lock()

    def received(self, request: dict[str, Any]) -> tuple[str, str, dict]:
        """Log the request (synced) and take its fault from the plan; (stage, item, fault)."""
        stage = request.get("response_format", {}).get("json_schema", {}).get("name", "")
        item = hashlib.sha256(json.dumps(request["messages"][:2], sort_keys=True).encode()).hexdigest()[:16]
        with self.lock:
            faults = self.plan.get(stage, [])
            fault = faults.pop(0) if faults else {}
            self.write_log({"event": "received", "stage": stage, "item": item, "fault": fault})
        return stage, item, fault

    def answered(self, stage: str, item: str) -> None:
        with self.lock:
            self.write_log({"event": "answered", "stage": stage, "item": item})

    def write_log(self, entry: dict[str, Any]) -> None:
        self.log.write(json.dumps({**entry, "t": time.time()}) + "\n")
        self.log.flush()
        os.fsync(self.log.fileno())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: WireServer

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path != "/v1/chat/completions":
            return self.error(404, "not_found_error", f"no route {self.path}")
        stage, item, fault = self.server.received(request)
        time.sleep(fault.get("slow_s", 0))
        try:
            if "status" in fault:
                headers = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
                return self.error(fault["status"], "server_error", "injected fault", headers)
            if "body" in fault:
                return self.reply(200, fault["body"])
            content = fault["content"] if "content" in fault else json.dumps(answer_for(stage, request))
            message = {"role": "assistant", "content": content}
            completion = {
                "id": f"chatcmpl-{time.time_ns()}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": request["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            self.reply(200, json.dumps(completion))
        except (BrokenPipeError, ConnectionResetError):  # the client gave up first (a slow answer)
            return None
        if "content" not in fault:
            self.server.answered(stage, item)

    def error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        self.reply(status, json.dumps({"error": {"message": message, "type": kind, "code": status}}), headers)

    def reply(self, status: int, body: str, headers: dict[str, str] | None = None) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def main(plan_path: str, state_dir: str) -> None:
    state = Path(state_dir)
    server = WireServer(json.loads(Path(plan_path).read_text()), state)
    (state / "port.tmp").write_text(str(server.server_address[1]))
    os.replace(state / "port.tmp", state / "port")
    server.serve_forever()


if __name__ == "__main__":
    main(*sys.argv[1:])
