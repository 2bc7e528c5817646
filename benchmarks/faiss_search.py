"""Search over 1,000,000 random 512-d unit vectors: exact inner product vs. IVF-Flat and HNSW.
Prints one JSON line: build time, index memory, queries/s, and recall@10 against exact search
for a sweep of nprobe / efSearch; `chosen_*` is the fastest setting with recall@10 >= 0.95.

Vectors: `--data clustered` (default) draws them around 20,000 random centres with noise, as
real embeddings cluster; `--data iid` draws them i.i.d. Gaussian, the hardest case for any
approximate index (no structure to exploit). Queries are perturbed corpus vectors.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import faiss
import numpy as np


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def make_data(n: int, dim: int, queries: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "iid":
        base = unit(rng.standard_normal((n, dim), dtype=np.float32))
    else:
        centres = unit(rng.standard_normal((n // 50, dim), dtype=np.float32))
        base = np.empty((n, dim), dtype=np.float32)
        for start in range(0, n, 100_000):
            stop = min(n, start + 100_000)
            noise = 0.6 / np.sqrt(dim) * rng.standard_normal((stop - start, dim), dtype=np.float32)
            base[start:stop] = unit(centres[rng.integers(0, len(centres), stop - start)] + noise)
    picked = rng.integers(0, n, queries)
    query = unit(base[picked] + 0.5 / np.sqrt(dim) * rng.standard_normal((queries, dim), dtype=np.float32))
    return base, query


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed_search(index, query: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    start = time.perf_counter()
    _, found = index.search(query, k)
    return found, len(query) / (time.perf_counter() - start)


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--data", choices=["clustered", "iid"], default="clustered")
    parser.add_argument("--nlist", type=int, default=4096)
    parser.add_argument("--kinds", nargs="+", choices=["ivf", "hnsw"], default=["ivf", "hnsw"])
    args = parser.parse_args()
    base, query = make_data(args.n, args.dim, args.queries, args.data)
    k = 10
    flat = faiss.IndexFlatIP(args.dim)
    flat.add(base)
    exact, flat_qps = timed_search(flat, query, k)
    out = {
        "benchmark": "faiss_search",
        "n": args.n,
        "dim": args.dim,
        "data": args.data,
        "queries": args.queries,
        "threads": faiss.omp_get_max_threads(),
        "flat_qps": round(flat_qps, 1),
    }
    if "ivf" in args.kinds:
        search_ivf(args, base, query, exact, flat_qps, out)
    if "hnsw" in args.kinds:
        search_hnsw(args, base, query, exact, flat_qps, out)
    out["peak_rss_mb"] = round(rss_mb(), 1)
    print(json.dumps(out))


def search_ivf(args, base, query, exact, flat_qps, out) -> None:
    k = 10
    start = time.perf_counter()
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(args.dim), args.dim, args.nlist, faiss.METRIC_INNER_PRODUCT)
    train = base[np.random.default_rng(1).choice(args.n, min(args.n, 40 * args.nlist), replace=False)]
    ivf.train(train)
    ivf.add(base)
    out["ivf_build_s"] = round(time.perf_counter() - start, 1)
    out["ivf_memory_mb"] = round(
        args.n * args.dim * 4 / 2**20 + args.nlist * args.dim * 4 / 2**20 + args.n * 8 / 2**20, 1
    )
    sweep = []
    for nprobe in (4, 8, 16, 32, 64, 128):
        ivf.nprobe = nprobe
        found, qps = timed_search(ivf, query, k)
        sweep.append(
            {
                "nprobe": nprobe,
                "recall@10": round(recall(found, exact), 4),
                "qps": round(qps, 1),
                "speedup": round(qps / flat_qps, 1),
            }
        )
    out["ivf"] = sweep
    good = [s for s in sweep if s["recall@10"] >= 0.95]
    if good:
        best = max(good, key=lambda s: s["qps"])
        out["chosen_ivf"] = best


def search_hnsw(args, base, query, exact, flat_qps, out) -> None:
    k = 10
    start = time.perf_counter()
    hnsw = faiss.IndexHNSWFlat(args.dim, 32, faiss.METRIC_INNER_PRODUCT)
    hnsw.hnsw.efConstruction = 64
    hnsw.add(base)
    out["hnsw_build_s"] = round(time.perf_counter() - start, 1)
    sweep = []
    for ef in (16, 32, 64, 128, 256):
        hnsw.hnsw.efSearch = ef
        found, qps = timed_search(hnsw, query, k)
        sweep.append(
            {
                "efSearch": ef,
                "recall@10": round(recall(found, exact), 4),
                "qps": round(qps, 1),
                "speedup": round(qps / flat_qps, 1),
            }
        )
    out["hnsw"] = sweep
    good = [s for s in sweep if s["recall@10"] >= 0.95]
    if good:
        out["chosen_hnsw"] = max(good, key=lambda s: s["qps"])


if __name__ == "__main__":
    main()
