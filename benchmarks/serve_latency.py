"""`lit-retrieval serve` under load: per-query latency (p50/p95) with 1 and 8 concurrent clients,
moments off and on, at 10^5 videos; the server's RSS before and after 10^4 distinct queries; and
the wall time of one `lit-retrieval search` command for comparison. Prints one JSON line.

The model is the quick-start one (configs/quickstart.yaml: CLIP4Clip-meanP, a tiny ViT and the
packaged all-MiniLM-L6-v2 as text tower; its checkpoint with --ckpt, untrained weights otherwise:
the cost is the same). The index holds synthetic unit vectors of the model's dimension under its
fingerprint (embedding 10^5 real videos takes hours on a CPU); its 10^5 entries are symbolic
links to `--clips` real synthetic clips, so the moment finder embeds real windows (once per clip,
during the warm-up queries; the timed queries then find cached windows, as a running service
does). Every query text is distinct (none is answered from the text cache). Clients are separate
processes, each on one keep-alive connection to 127.0.0.1, sending one query after another.
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
    """The i-th of an unbounded list of distinct natural queries."""
    return f"{SUBJECTS[i % 5]} {ACTIONS[(i // 5) % 6]} {SCENES[(i // 30) % 4]}" + (
        f", then stops after {i // 120 + 1} seconds" if i >= 120 else ""
    )


def write_synthetic_index(out: Path, clips: list[Path], size: int, fingerprint: str, dim: int, spec: dict) -> None:
    """An index folder as `lit-retrieval index` writes it: `size` random unit vectors, entry i a link
    to clip i mod len(clips)."""
    import faiss
    import numpy as np

    links = out / "videos"
    links.mkdir(parents=True, exist_ok=True)
    videos = []
    for i in range(size):
        link = links / f"video_{i:06d}.mp4"
        link.symlink_to(clips[i % len(clips)])
        videos.append(str(link))
    vectors = np.random.default_rng(size).standard_normal((size, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index = faiss.IndexFlatIP(dim)
    index.add(vectors)
    faiss.write_index(index, str(out / "index.faiss"))
    (out / "videos.json").write_text(json.dumps(videos))
    meta = {"fingerprint": fingerprint, "model": spec, "settings": {"kind": "flat"}, "dim": dim, "count": size}
    (out / "meta.json").write_text(json.dumps({**meta, "failed": 0}))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmRSS")


def wait_until_up(port: int, server: subprocess.Popen, timeout: float = 600) -> float:
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


def client(port: int, first: int, queries: int, k: int) -> list[float]:
    """Runs in its own process: queries `first`.. over one keep-alive connection; seconds of each."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    latencies = []
    for i in range(first, first + queries):
        body = json.dumps({"text": query_text(i), "k": k})
        started = time.perf_counter()
        connection.request("POST", "/search", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        latencies.append(time.perf_counter() - started)
        if response.status != 200 or len(answer["results"]) != k:
            raise RuntimeError(f"bad answer: {answer}")
    return latencies


def run_clients(port: int, clients: int, first: int, queries: int, k: int, env: dict) -> list[float]:
    """`clients` client processes at once, each sending `queries` distinct queries; all latencies."""
    commands = [
        [sys.executable, __file__, "--client", str(port), "--first", str(first + c * queries)]
        + ["--queries", str(queries), "-k", str(k)]
        for c in range(clients)
    ]
    processes = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=env) for c in commands]
    latencies = []
    for process in processes:
        out, _ = process.communicate()
        if process.returncode:
            raise RuntimeError("a client failed")
        latencies += json.loads(out.strip().splitlines()[-1])
    return latencies


def summary(latencies: list[float]) -> dict:
    ordered = sorted(latencies)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 1),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 1),
        "queries": len(ordered),
    }


def one_shot_search(index: Path, k: int, env: dict) -> float:
    """Wall seconds of `lit-retrieval search INDEX TEXT` (a fresh process: imports, model, index, query)."""
    started = time.perf_counter()
    command = ["search", str(index), query_text(10**7), "-k", str(k), "--json"]
    subprocess.run([sys.executable, "-m", "lit_retrieval", *command], check=True, capture_output=True, env=env)
    return time.perf_counter() - started


def start_server(index: Path, work: Path, moments: int, args, env: dict) -> tuple[subprocess.Popen, int, float]:
    port = free_port()
    command = [sys.executable, "-m", "lit_retrieval", "serve", str(index), "--port", str(port)]
    command += ["--moment-segments", str(moments), "--threads", str(args.threads), "--cache-dir", str(work / "cache")]
    server = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=work)
    return server, port, wait_until_up(port, server)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--ckpt")
    parser.add_argument("--size", type=int, default=100_000, help="videos in the index")
    parser.add_argument("--clips", type=int, default=8, help="real clips the index entries link to")
    parser.add_argument("--queries", type=int, default=40, help="timed queries per client")
    parser.add_argument("--warmup", type=int, default=16)
    parser.add_argument("--rss-queries", type=int, default=10_000, help="distinct queries between the RSS readings")
    parser.add_argument("-k", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1, help="the server's --threads")
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)  # internal: run as a client of this port
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client(args.client, args.first, args.queries, args.k)))
        return
    from lit_retrieval.data.items import MediaItem
    from lit_retrieval.data.datasets.synthetic import SynthConfig, generate_corpus
    from lit_retrieval.search.loading import ModelSpec, load_item_embedder

    spec = ModelSpec(config=args.config, ckpt=args.ckpt).resolved()
    embedder = load_item_embedder(spec)
    dim = int(embedder.embed([MediaItem(text="probe")]).shape[1])
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    table, rss = [], {}
    with tempfile.TemporaryDirectory(prefix="serve-latency-") as folder:
        work = Path(folder)
        generate_corpus(work / "clips", SynthConfig(num_videos=args.clips, seed=1), workers=1, progress=False)
        clips = sorted((work / "clips" / "videos").glob("*.mp4"))
        index = work / "index"
        write_synthetic_index(index, clips, args.size, embedder.fingerprint, dim, spec.__dict__)
        next_query = 0
        for moments in (4, 0):  # the RSS queries last, on the server with moments off
            server, port, startup = start_server(index, work, moments, args, env)
            try:
                run_clients(port, 1, next_query, args.warmup, args.k, env)  # and the clips' moment windows
                next_query += args.warmup
                for clients in (1, 8):
                    latencies = run_clients(port, clients, next_query, args.queries, args.k, env)
                    next_query += clients * args.queries
                    table.append({"moments": moments, "clients": clients, **summary(latencies)})
                    print(json.dumps(table[-1]), file=sys.stderr, flush=True)  # progress
                if moments == 0 and args.rss_queries:
                    before = rss_mb(server.pid)
                    run_clients(port, 8, next_query, args.rss_queries // 8, args.k, env)
                    next_query += args.rss_queries
                    rss = {"rss_mb_before": before, "rss_mb_after": rss_mb(server.pid), "queries": args.rss_queries}
            finally:
                server.terminate()
                server.wait(30)
        search_s = one_shot_search(index, args.k, env)
    single = next(r["p50_ms"] for r in table if r["clients"] == 1 and r["moments"] == 0)
    eight = next(r["p95_ms"] for r in table if r["clients"] == 8 and r["moments"] == 0)
    print(
        json.dumps(
            {
                "benchmark": "serve_latency",
                "model": "configs/quickstart.yaml",
                "index": "flat",
                "size": args.size,
                "dim": dim,
                "k": args.k,
                "threads": args.threads,
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "server_startup_s": round(startup, 1),
                "latency": table,
                "p95_8_clients_over_p50_1_client": round(eight / single, 2),
                "rss": rss,
                "search_command_s": round(search_s, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
