"""`lit-retrieval serve`'s API: ranking and moments checked against the synthetic corpus'
annotations, thumbnails decoded back, HTTP range reads against the file's bytes, and the safety
cases (path traversal in every spelling, symlinks, oversize bodies, malformed requests: each a JSON
error), with the index folder unchanged by serving."""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import subprocess
import sys
import time

import pytest
from PIL import Image

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from lit_retrieval.data.annotations import load_annotations  # noqa: E402
from lit_retrieval.data.text.queries import concat_query  # noqa: E402
from lit_retrieval.serve.app import Limits, create_app  # noqa: E402
from helpers.serve_helpers import LiveServer, free_port, make_service  # noqa: E402


@pytest.fixture(scope="module")
def served(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    limits = Limits(max_json_bytes=4096, max_upload_bytes=200_000, max_k=50)
    service = make_service(corpus, root / "index", root / "cache", limits)
    return service, TestClient(create_app(service), base_url="http://localhost")


@pytest.fixture(scope="module")
def live(served):
    with LiveServer(served[0]) as server:
        yield server


@pytest.fixture(scope="module")
def records(corpus):
    return {r.path.rsplit("/", 1)[-1]: r for r in load_annotations(corpus / "annotations.json")}


def snapshot(folder) -> dict:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_json_error(response, status: int) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status and isinstance(body["error"], str) and body["error"]


def test_each_video_ranks_first_for_its_own_caption(served, records):
    service, client = served
    for name, record in records.items():
        answer = client.post("/search", json={"text": concat_query(record.descriptions), "k": 5}).json()
        assert answer["results"][0]["name"] == name and len(answer["results"]) == 5
        assert [r["rank"] for r in answer["results"]] == [1, 2, 3, 4, 5]
        scores = [r["score"] for r in answer["results"]]
        assert scores == sorted(scores, reverse=True) and scores[0] == pytest.approx(1.0, abs=1e-5)
    events = client.post("/search", json={"events": list(record.descriptions), "k": 1}).json()
    assert events["results"][0]["name"] == name


def test_the_moment_is_where_the_event_happens(served, records):
    """A single event's description: the best window of each found video that shows the event
    overlaps one of the event's annotated intervals."""
    service, client = served
    checked = 0
    for record in list(records.values())[:6]:
        event = record.events[-1]
        answer = client.post("/search", json={"text": event.description, "k": 3}).json()
        for result in answer["results"]:
            shows = [e for e in records[result["name"]].events if e.event_id == event.event_id]
            if not shows:
                continue
            moment = result["moment"]
            assert moment["start"] < moment["time"] < moment["end"]
            assert any(min(b, moment["end"]) > max(a, moment["start"]) for a, b in shows[0].intervals)
            assert result["thumbnail"] == f"/thumbnail/{result['id']}?t={moment['time']:.1f}"
            checked += 1
    assert checked >= 6


def test_thumbnail_is_the_frame_at_the_moment_and_is_cached(served, corpus, records):
    service, client = served
    first = client.get("/thumbnail/0?t=1.0")
    assert first.status_code == 200 and first.headers["content-type"] == "image/jpeg"
    image = Image.open(io.BytesIO(first.content))
    assert image.format == "JPEG" and max(image.size) <= 320
    cached = list((service.thumbnails.folder).glob("0-*-1000.jpg"))
    assert len(cached) == 1 and cached[0].read_bytes() == first.content
    os.utime(cached[0], ns=(1, 1))  # a second request serves the cached file, not a new rendering
    assert client.get("/thumbnail/0?t=1.04").content == first.content and cached[0].stat().st_mtime_ns == 1
    assert client.get("/thumbnail/0").status_code == 200  # no time: the middle of the video


def test_video_supports_range_requests(served):
    service, client = served
    data = open(service.index.videos[2], "rb").read()
    whole = client.get("/video/2")
    assert whole.status_code == 200 and whole.content == data and whole.headers["content-type"] == "video/mp4"
    assert whole.headers["accept-ranges"] == "bytes"
    part = client.get("/video/2", headers={"Range": "bytes=100-199"})
    assert part.status_code == 206 and part.content == data[100:200]
    assert part.headers["content-range"] == f"bytes 100-199/{len(data)}"
    assert client.get("/video/2", headers={"Range": f"bytes={len(data) + 10}-"}).status_code == 416


def test_video_upload_finds_the_same_video(served, records):
    service, client = served
    data = open(service.index.videos[4], "rb").read()
    answer = client.post("/search", files={"file": ("query.mp4", data, "video/mp4")}, data={"k": "2"}).json()
    assert answer["results"][0]["id"] == 4 and len(answer["results"]) == 2


@pytest.mark.parametrize(
    "url",
    [
        "/video/../../etc/passwd",
        "/video/..%2F..%2Fetc%2Fpasswd",
        "/video/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/video//etc/passwd",
        "/video/%2Fetc%2Fpasswd",
        "/thumbnail/..%2F..%2Fetc%2Fpasswd",
        "/thumbnail/%2fetc%2fpasswd",
        "/video/-1",
        "/video/99999",
        "/thumbnail/99999",
        "/video/0x1",
        "/video/1.0",
        "/video/%252e%252e%252f",
        "/static/../../../etc/passwd",
        "/..%2f..%2fetc%2fpasswd",
    ],
)
def test_urls_reach_only_indexed_videos(live, url):
    """Sent byte for byte (http.client does not normalise `..` or percent-escapes as httpx would)."""
    connection = http.client.HTTPConnection("127.0.0.1", live.port, timeout=10)
    connection.request("GET", url)
    response = connection.getresponse()
    body = response.read()
    assert response.status in (404, 422), url
    error = json.loads(body)
    assert error["status"] == response.status and error["error"]
    assert b"root:" not in body


def test_symlinks_do_not_leak_other_files(served, tmp_path):
    service, client = served
    secret = tmp_path / "secret.txt"
    secret.write_text("root:secret")
    client.get("/thumbnail/1?t=0.5")  # creates the cached file, then replace it with a link to the secret
    cached = next(service.thumbnails.folder.glob("1-*-500.jpg"))
    cached.unlink()
    cached.symlink_to(secret)
    response = client.get("/thumbnail/1?t=0.5")
    assert response.status_code == 200 and response.content[:2] == b"\xff\xd8" and b"secret" not in response.content
    assert not cached.is_symlink() and secret.read_text() == "root:secret"
    listed = service.index.videos[3]
    original = tmp_path / "original.mp4"
    os.replace(listed, original)
    try:
        os.symlink(secret, listed)  # an indexed name now pointing at a file that is no video
        assert_json_error(client.get("/video/3"), 404)
        assert_json_error(client.get("/thumbnail/3"), 404)
        os.unlink(listed)
        os.symlink(original, listed)  # a link to a video is served
        assert client.get("/video/3").content == original.read_bytes()
    finally:
        os.unlink(listed)
        os.replace(original, listed)


@pytest.mark.parametrize(
    "kwargs, status",
    [
        ({"content": b"{not json", "headers": {"content-type": "application/json"}}, 400),
        ({"json": {}}, 422),
        ({"json": {"text": "   "}}, 422),
        ({"json": {"text": "a", "events": ["b"]}}, 422),
        ({"json": {"text": "a", "k": 0}}, 422),
        ({"json": {"text": "a", "k": 51}}, 422),
        ({"json": {"text": "a", "k": "many"}}, 422),
        ({"json": {"text": "a", "path": "/etc/passwd"}}, 422),
        ({"json": ["text"]}, 422),
        ({"json": {"events": ["one", ""]}}, 422),
        ({"json": {"text": "x" * 5000}}, 413),
        ({"json": {"text": "x" * 2500, "k": 1}}, 422),
        ({"content": b"text=a", "headers": {"content-type": "application/x-www-form-urlencoded"}}, 415),
        ({"files": {"file": ("q.txt", b"hello", "text/plain")}}, 422),
        ({"files": {"file": ("q.png", b"\x89PNG", "image/png")}}, 422),
        ({"files": {"file": ("q.mp4", b"\x00" * 300_000, "video/mp4")}}, 413),
        ({"files": {"file": ("q.mp4", b"\x00" * 1000, "video/mp4")}}, 422),
        ({"data": {"k": "3"}, "files": {"other": ("q.mp4", b"x", "video/mp4")}}, 422),
    ],
)
def test_every_bad_search_gets_a_json_error(served, kwargs, status):
    assert_json_error(served[1].post("/search", **kwargs), status)


def test_a_body_sent_without_its_length_is_still_bounded(served):
    chunks = (b"x" * 1024 for _ in range(16))  # chunked transfer: no Content-Length to check up front
    assert_json_error(served[1].post("/search", content=chunks, headers={"content-type": "application/json"}), 413)


def test_unknown_routes_and_methods_are_json_errors(served):
    client = served[1]
    assert_json_error(client.get("/nothing"), 404)
    assert_json_error(client.get("/search"), 405)
    assert_json_error(client.delete("/video/0"), 405)


def test_health_info_and_page(served):
    service, client = served
    assert client.get("/health").json() == {"status": "ok", "count": 24}
    info = client.get("/info").json()
    assert (info["count"], info["dim"], info["kind"], info["fingerprint"]) == (24, 256, "flat", "annotation-vectors")
    assert info["modalities"] == ["T", "V"] and info["limits"]["max_k"] == 50
    page = client.get("/")
    assert page.status_code == 200 and 'id="query"' in page.text and "/search" in page.text


def test_serving_leaves_the_index_unchanged(served):
    service, client = served
    before = snapshot(service.index_path)
    client.post("/search", json={"text": service.embedder.records and next(iter(service.embedder.texts)), "k": 3})
    client.get("/thumbnail/5?t=2")
    client.get("/video/5", headers={"Range": "bytes=0-9"})
    assert snapshot(service.index_path) == before
    assert not service.thumbnails.folder.resolve().is_relative_to(service.index_path.resolve())


@pytest.mark.slow
def test_serve_command_answers_as_the_search_command(tmp_path, tiny_qwen, corpus):
    """The real command with a tiny GVE: the served ranking equals `lit-retrieval search --json`."""
    cli = [sys.executable, "-m", "lit_retrieval"]
    videos = sorted((corpus / "videos").glob("*.mp4"))[:6]
    (tmp_path / "list.txt").write_text("\n".join(str(v) for v in videos))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    index = str(tmp_path / "idx")
    subprocess.run(
        [*cli, "index", "--model", str(tiny_qwen), "--videos", str(tmp_path / "list.txt"), "--out", index],
        check=True,
        env=env,
        capture_output=True,
    )
    found = subprocess.run(
        [*cli, "search", index, "a red circle", "-k", "4", "--json"],
        check=True,
        env=env,
        capture_output=True,
        text=True,
    ).stdout
    line = next(line for line in found.splitlines() if line.startswith("{"))
    expected = [r["video"] for r in json.loads(line)["results"]]
    port = free_port()
    server = subprocess.Popen(
        [*cli, "serve", index, "--port", str(port), "--moment-segments", "2"], env=env, stderr=subprocess.PIPE
    )
    try:
        import httpx

        deadline = time.monotonic() + 120
        while True:
            try:
                assert httpx.get(f"http://127.0.0.1:{port}/health").json()["count"] == 6
                break
            except httpx.TransportError:
                assert server.poll() is None, server.stderr.read().decode()
                assert time.monotonic() < deadline, "the server did not answer within 120 s"
                time.sleep(0.3)
        answer = httpx.post(f"http://127.0.0.1:{port}/search", json={"text": "a red circle", "k": 4}, timeout=60).json()
        index_videos = json.loads((tmp_path / "idx" / "videos.json").read_text())
        assert [index_videos[r["id"]] for r in answer["results"]] == expected
        assert all(r["moment"] is not None for r in answer["results"])
        assert list((tmp_path / "cache" / "lit-retrieval" / "serve").rglob("moments-*.npy"))
    finally:
        server.terminate()
        server.wait(20)
