"""`lit-retrieval serve` against the one-shot `lit-retrieval search`: per-query latency (p50/p95) and
queries/s of the running server, and the wall time of one `search` command, for indexes of 10^4 and
10^5 videos. Prints one JSON line.

The model is the quick-start one (configs/quickstart.yaml: CLIP4Clip-meanP with all-MiniLM-L6-v2 as
text tower; its checkpoint with --ckpt, untrained weights otherwise: the cost is the same). The
indexes hold synthetic unit vectors of the model's dimension under its fingerprint (embedding 10^5
real videos takes hours on a CPU); the video files do not exist, so the server runs with moments off
and a query costs one text embedding plus one faiss search, as in `search`. The server listens on
127.0.0.1 only; a second process sends `--queries` distinct text queries one after another (each new
to the text tower's cache) after `--warmup` untimed ones.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUBJECTS = ["a red circle", "a small blue square", "a green triangle", "a yellow star", "an orange plus sign"]
ACTIONS = ["moves left", "bounces", "spins slowly", "travels in a circle", "slides to the right", "grows"]
SCENES = ["on a sandy field", "over a pitch black backdrop", "against a striped wall", "in a grey room"]


def query_text(i: int) -> str:
    """Distinct natural queries (none repeats, so no query is answered from the text cache)."""
    return f"{SUBJECTS[i % 5]} {ACTIONS[(i // 5) % 6]} {SCENES[(i // 30) % 4]}" + (
        f", then stops after {i // 120 + 1} seconds" if i >= 120 else ""
    )


def write_synthetic_index(out: Path, size: int, fingerprint: str, dim: int, spec: dict) -> None:
    """An index folder as `lit-retrieval index` writes it, over `size` random unit vectors."""
    import faiss
    import numpy as np

    out.mkdir(parents=True, exist_ok=True)
    vectors = np.random.default_rng(size).standard_normal((size, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    faiss.write_index(index, str(out / "index.faiss"))
    (out / "videos.json").write_text(json.dumps([f"/synthetic/video_{i:06d}.mp4" for i in range(size)]))
    meta = {
        "fingerprint": fingerprint,
        "model": spec,
        "settings": {"kind": "flat"},
        "dim": dim,
        "count": size,
        "failed": 0,
    }
    (out / "meta.json").write_text(json.dumps(meta))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(port: int, server: subprocess.Popen, timeout: float = 300) -> float:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited: {server.stderr.read().decode()[-2000:]}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return time.perf_counter() - started
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the server did not come up")


def client(port: int, queries: int, warmup: int, k: int) -> dict:
    """Runs in its own process: send the queries over one keep-alive connection, time each."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    latencies = []
    for i in range(warmup + queries):
        body = json.dumps({"text": query_text(i), "k": k})
        started = time.perf_counter()
        connection.request("POST", "/search", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        elapsed = time.perf_counter() - started
        if response.status != 200 or len(answer["results"]) != k:
            raise RuntimeError(f"bad answer: {answer}")
        if i >= warmup:
            latencies.append(elapsed)
    latencies.sort()
    return {
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p95_ms": round(1000 * latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 2),
        "qps": round(len(latencies) / sum(latencies), 2),
        "queries": len(latencies),
    }


def one_shot_search(index: Path, runs: int, k: int, env: dict) -> float:
    """Median wall seconds of `lit-retrieval search INDEX TEXT` (a fresh process: imports, model, index, query)."""
    times = []
    for i in range(runs):
        started = time.perf_counter()
        command = ["search", str(index), query_text(1000 + i), "-k", str(k), "--json"]
        subprocess.run([sys.executable, "-m", "lit_retrieval", *command], check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--ckpt")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=40, help="timed queries per size")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--search-runs", type=int, default=1, help="one-shot `search` commands timed per size")
    parser.add_argument("-k", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="the server's --threads")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)  # internal: run as the client of this port
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client(args.client, args.queries, args.warmup, args.k)))
        return
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    spec = ModelSpec(config=args.config, ckpt=args.ckpt).resolved()
    embedder = load_item_embedder(spec)
    from lit_retrieval.data.media import MediaItem

    dim = int(embedder.embed([MediaItem(text="probe")]).shape[1])
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    results = {}
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as work:
        for size in args.sizes:
            index = Path(work) / f"index-{size}"
            write_synthetic_index(index, size, embedder.fingerprint, dim, spec.__dict__)
            port = free_port()
            server = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "lit_retrieval",
                    "serve",
                    str(index),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--moment-segments",
                    "0",
                    "--threads",
                    str(args.threads),
                    "--cache-dir",
                    str(Path(work) / "cache"),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=work,
            )
            try:
                startup = wait_until_up(port, server)
                command = [
                    sys.executable,
                    __file__,
                    "--client",
                    str(port),
                    "--queries",
                    str(args.queries),
                    "--warmup",
                    str(args.warmup),
                    "-k",
                    str(args.k),
                ]
                measured = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
                served = json.loads(measured.stdout.strip().splitlines()[-1])
            finally:
                server.terminate()
                server.wait(30)
            search_s = one_shot_search(index, args.search_runs, args.k, env)
            results[str(size)] = {
                **served,
                "server_startup_s": round(startup, 2),
                "search_command_s": round(search_s, 2),
                "speedup_p50": round(search_s / (served["p50_ms"] / 1000), 1),
            }
    print(
        json.dumps(
            {
                "benchmark": "serve_latency",
                "model": "configs/quickstart.yaml",
                "index": "flat",
                "dim": dim,
                "k": args.k,
                "threads": args.threads,
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "sizes": results,
            }
        )
    )


if __name__ == "__main__":
    main()
