"""`lit-retrieval serve` as a process, against clients that hold a connection: request headers and
bodies sent too slowly get a JSON 408 and the connection closed; SIGTERM stops the server within
the shutdown timeout even while a client holds a request body open; a client that disconnects
mid-upload costs one log line; a busy port is reported before any model or index is loaded."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from lit_retrieval.serve.app import Limits  # noqa: E402
from helpers.serve_helpers import LiveServer, free_port, make_service  # noqa: E402

HELPERS = Path(__file__).parents[1] / "helpers" / "serve_helpers.py"
JSON_HEAD = b"POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


def read_answer(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    sock.settimeout(timeout)
    started, data = time.monotonic(), b""
    while chunk := sock.recv(65536):
        data += chunk
    return data, time.monotonic() - started


def json_status(answer: bytes) -> tuple[int, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


@pytest.fixture(scope="module")
def impatient(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("impatient")
    service = make_service(corpus, root / "index", root / "cache", Limits(header_timeout_s=0.5, body_timeout_s=0.5))
    with LiveServer(service) as server:
        yield server


def test_headers_sent_too_slowly_get_408_and_the_connection_closed(impatient):
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")  # and never the rest
        answer, took = read_answer(sock, 10)
    status, error = json_status(answer)
    assert status == 408 and error["status"] == 408 and "headers" in error["error"] and took < 5


def test_a_connection_that_sends_nothing_is_closed(impatient):
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        answer, took = read_answer(sock, 10)
    assert json_status(answer)[0] == 408 and took < 5


def test_a_body_sent_too_slowly_gets_408(impatient):
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        sock.sendall(JSON_HEAD % 100 + b'{"text": ')  # 9 of the 100 bytes promised
        answer, took = read_answer(sock, 10)
    status, error = json_status(answer)
    assert status == 408 and "body" in error["error"] and took < 5


def test_malformed_http_gets_a_json_400(impatient):
    with socket.create_connection(("127.0.0.1", impatient.port)) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer, _ = read_answer(sock, 10)
    status, error = json_status(answer)
    assert status == 400 and error["status"] == 400


@pytest.fixture()
def server_process(corpus, tmp_path):
    """The helper server process (`serve_forever`, as the command runs it), shutdown timeout 1 s."""
    make_service(corpus, tmp_path / "index", tmp_path / "c0")
    port = free_port()
    command = [
        sys.executable,
        str(HELPERS),
        str(corpus),
        str(tmp_path / "index"),
        str(tmp_path / "cache"),
        str(port),
        "1",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HELPERS.parent), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
    yield process, port
    if process.poll() is None:
        process.kill()
        process.wait(10)


def test_a_dropped_upload_is_one_log_line_and_sigterm_stops_a_held_body(server_process):
    """One server process for both (starting one takes seconds): a client that disconnects mid-upload
    costs one log line and no traceback; SIGTERM while another client holds a request body open
    stops the server within its shutdown timeout (1 s), not the body timeout (60 s)."""
    process, port = server_process
    boundary = "b0undary"
    with socket.create_connection(("127.0.0.1", port)) as dropped:
        dropped.sendall(
            (
                "POST /search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                f"Content-Length: 100000\r\n\r\n--{boundary}\r\n"
                'Content-Disposition: form-data; name="file"; filename="q.mp4"\r\n\r\n'
            ).encode()
            + b"\x00" * 1000
        )
        time.sleep(0.3)
    with socket.create_connection(("127.0.0.1", port)) as held:
        held.sendall(JSON_HEAD % 1000 + b'{"text": "')
        time.sleep(0.5)  # the request is in the app, waiting for the rest of its body
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=15)
        assert time.monotonic() - started < 6
    assert "Traceback" not in stderr, stderr
    assert len([line for line in stderr.splitlines() if "disconnect" in line]) == 1, stderr


def test_a_busy_port_is_reported_before_the_index_or_model_loads(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        started = time.monotonic()
        result = subprocess.run(
            [sys.executable, "-m", "lit_retrieval", "serve", str(tmp_path / "no-index"), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert "no-index" not in result.stderr and time.monotonic() - started < 60
