"""Scale benchmark: synthetic pairs of 100k, 300k and 1M nodes, end to end on Ray.

    python -m jobs.bench_scale                                    # 100k, 300k, 1M
    python -m jobs.bench_scale --sizes 100000 --exact-sample 2000 # a quick look

For each size, ``tfgm-dist synth`` writes the pair (seed 0, Parquet layout: power-law
degrees, mean degree 10, 5 % of the edges removed and as many added, permuted ids, 128-wide
features with Gaussian noise), and the real command ``tfgm-dist align --partitions P`` with
``jobs/configs/synthetic.toml`` (L = 2, ``ivfpq`` search tuned to 99 % recall@1, sparse
one-to-one) aligns it in a new process that starts its own local Ray cluster. While it runs,
the proportional set size (PSS) of its whole process tree is sampled every half second: PSS
counts a shared object-store page once, so the sum is the memory the job held. The growth of
the machine's used memory over the run is sampled beside it as a check. A part actor's heap
is its resident set less the shared pages, sampled in the actor every 0.2 s: what Ray's
memory guide counts as a worker's memory, the object store's pages it read being the
node's store (its resident set, printed beside, counts them in every process that read them).

Then, in this process, on the same embeddings (the pipeline is deterministic): exact search
for a seeded sample of gold sources, against the run's decided matches on that sample; and
each stage against its bound on this machine, measured first in the same run: propagation
against memory bandwidth for the bytes the sparse products must move (streamed: the previous
layer read once; gathered: once per non-zero, what a random node order costs), search
against the dense matrix-multiply rate for the multiply-adds it does (coarse quantisation,
k-means training, exact search of the tuning sample, exact re-ranking); the fast-scan code
lookups are not multiply-adds, and their rate is printed beside.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import faiss
import numpy as np
import pyarrow.dataset as ds
import torch

from jobs import warn_uncompiled
from jobs.bench_engine import CONFIGS
from tfgm_dist.config import load_config
from tfgm_dist.pipeline import channels, embeddings, load_pair, operators
from tfgm_dist.search import REFINE_FACTOR, TRAIN_PER_LIST, ieee_float32, pq_codes

CONFIG = CONFIGS / "synthetic.toml"
KMEANS_ITERATIONS = 10  # FAISS's default for the coarse quantiser

# The GPU projection, from what one NVIDIA H100 80GB HBM3 did (BENCHMARKS.md, "On a GPU
# again", the twenty-second stop, `jobs.bench_gpu`): the 1M synthetic pair's embedding in one
# process took 6.3 s on it (both graphs, every layer, the copies to the GPU included), and its
# exact two-way search 52.1 s for 2 x 10^12 x 384 multiply-adds, 14.7 TFLOP/s: 0.30 of the
# float32 GEMM rate measured there (49.7 TFLOP/s). The IVF search of a GPU cluster is assumed
# to scan at that rate: faiss-gpu has not run on one.
H100 = {"embed_s_per_node": 6.3e-6, "search_flops": 14.7e12, "memory": 80e9}
# Where each CPU stage runs on Ray: the load's shares in tasks on the driver's host (where
# the files are), the streaming partition in one task a graph, the others on the part
# actors' CPUs (or their tasks), each over its own rows
HOST_STAGES = ("load",)
SERIAL_STAGES = ("partition",)
PART_STAGES = ("features", "refine", "assign", "write")


def machine_bounds(device: str = "cpu") -> dict[str, float]:
    """Memory bandwidth (bytes/s, a 512 MiB copy) and dense float32 GEMM rate (FLOP/s,
    IEEE float32, not TF32), best of five, with every core or on the GPU ``device``."""
    torch.set_num_threads(os.cpu_count() or 1)
    a = torch.rand(1 << 27, device=device)
    b = torch.empty_like(a)
    copy = min(_timed(lambda: b.copy_(a), device) for _ in range(5))
    x, y = torch.rand(4096, 4096, device=device), torch.rand(4096, 4096, device=device)
    with ieee_float32():
        gemm = min(_timed(lambda: x @ y, device) for _ in range(5))
    return {"bandwidth": 2 * a.numel() * 4 / copy, "gemm": 2 * 4096 ** 3 / gemm}


def _timed(f, device: str = "cpu") -> float:
    start = time.perf_counter()
    f()
    if device != "cpu":
        torch.cuda.synchronize(device)
    return time.perf_counter() - start


def _tree_pss(root: int) -> int:
    """Bytes of proportional set size of ``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _used() -> int:
    """Bytes of memory in use on this machine (``MemTotal - MemAvailable``): a check on the
    PSS sum that also sees what no process maps, such as object-store files."""
    info = dict(line.split(":") for line in Path("/proc/meminfo").read_text().splitlines())
    return (int(info["MemTotal"].split()[0]) - int(info["MemAvailable"].split()[0])) * 1024


def align(folder: Path, out: Path, partitions: int) -> tuple[float, dict, int, int]:
    """Wall seconds, metrics, peak process-tree PSS and peak growth of the machine's used
    memory during one ``tfgm-dist align`` run."""
    cmd = [sys.executable, "-m", "tfgm_dist.cli", "-q", "align", str(folder / "source"),
           str(folder / "target"), "--gold", str(folder / "gold.parquet"), "--config",
           str(CONFIG), "--partitions", str(partitions), "--out", str(out)]
    base, start = _used(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = [0, 0]

    def sample() -> None:
        while proc.poll() is None:
            peak[0] = max(peak[0], _tree_pss(proc.pid))
            peak[1] = max(peak[1], _used() - base)
            time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    sampler.start()
    if proc.wait():
        raise SystemExit(f"align failed with exit {proc.returncode}: {' '.join(cmd)}")
    wall = time.perf_counter() - start
    sampler.join()
    return wall, json.loads((out / "metrics.json").read_text()), peak[0], peak[1]


def exact_check(folder: Path, out: Path, sample: int, m: dict, bounds: dict) -> dict:
    """Exact search against the run's matches on a sample; each stage against its bound."""
    cfg = load_config(CONFIG)
    pair = load_pair(folder / "source", folder / "target", cfg, gold=folder / "gold.parquet")
    chans = channels(pair, cfg)
    ops = operators(pair, cfg)
    o_s, o_t = embeddings(chans, ops, cfg.seed)
    gold_s, gold_t = pair.gold
    pick = np.sort(np.random.default_rng(0).choice(gold_s.size, min(sample, gold_s.size),
                                                   replace=False))
    _, top = faiss.knn(o_s[gold_s[pick]].numpy(), o_t.numpy(), 1,
                       metric=faiss.METRIC_INNER_PRODUCT)
    exact = float(np.mean(top[:, 0] == gold_t[pick]))
    matches = ds.dataset(out / "matches", format="parquet").to_table(
        filter=ds.field("rank") == 1, columns=["source_id", "target_id"]).to_pydict()
    decided = dict(zip(matches["source_id"], matches["target_id"]))
    s_ids = pair.source.ids.take(gold_s[pick]).to_pylist()
    t_ids = pair.target.ids.take(gold_t[pick]).to_pylist()
    run = float(np.mean([decided.get(s) == t for s, t in zip(s_ids, t_ids)]))

    n, d = pair.target.num_nodes, o_t.size(1)
    width, layers = chans[0].x_s.size(1), cfg.embed.layers
    # per layer and graph: CSR values + column indices + row pointers and one write of the new
    # layer, plus the previous layer read once (streamed: the best node order could do) or
    # once per non-zero (gathered: what a random node order costs)
    csr = sum(op.edge_index.size(1) * 12 + op.num_nodes * (8 + width * 4) for op in ops)
    streamed = layers * (csr + sum(op.num_nodes * width * 4 for op in ops))
    gathered = layers * (csr + sum(op.edge_index.size(1) * width * 4 for op in ops))
    procs = m["ray"]["processes"]
    embed_s = max(p["seconds"].get("embed", 0.0) for p in procs)
    search_s = max(p["seconds"].get("search", 0.0) for p in procs)
    tuned = m["search"]["forward"]
    nlist, nprobe, q = tuned["nlist"], tuned["nprobe"], pair.source.num_nodes
    madds = (TRAIN_PER_LIST["ivfpq"] * nlist * nlist * d * KMEANS_ITERATIONS  # training
             + (n + q) * nlist * d  # coarse assignment of targets and sources
             + tuned["sample"] * n * d  # exact search on the tuning sample
             + q * REFINE_FACTOR * cfg.search.k * d)  # exact re-ranking
    lookups = q * nprobe * (n / nlist) * pq_codes(d)
    return {"sample": int(pick.size), "exact": 100 * exact, "run": 100 * run, "dim": d,
            "embed_s": embed_s, "streamed_s": streamed / bounds["bandwidth"],
            "gathered_s": gathered / bounds["bandwidth"],
            "search_s": search_s, "search_bound_s": 2 * madds / bounds["gemm"],
            "lookups_per_s": lookups / search_s, "nprobe": nprobe, "nlist": nlist,
            "recall": 100 * tuned["recall@1"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,300000,1000000")
    p.add_argument("--partitions", type=int, default=1)
    p.add_argument("--exact-sample", type=int, default=10000)
    p.add_argument("--data", help="keep the generated pairs here (reused when present)")
    args = p.parse_args()
    bounds = machine_bounds()
    print(f"machine: {os.cpu_count()} cores; memory bandwidth {bounds['bandwidth'] / 1e9:.1f} "
          f"GB/s (copy); dense GEMM {bounds['gemm'] / 1e9:.0f} GFLOP/s (float32)\n")
    warn_uncompiled()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tfgm-scale-") as tmp:
        data = Path(args.data or tmp)
        for n in (int(x) for x in args.sizes.split(",")):
            folder = data / f"synth-{n}"
            if not (folder / "gold.parquet").exists():
                subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "synth",
                                str(folder), "--nodes", str(n)], check=True,
                               stdout=subprocess.DEVNULL)
            out = Path(tmp) / f"out-{n}"
            wall, m, pss, used = align(folder, out, args.partitions)
            check = exact_check(folder, out, args.exact_sample, m, bounds)
            rows.append((n, wall, m, (pss, used), check))
            print(f"{n}: {wall:.0f} s, {pss / 2**30:.2f} GiB", file=sys.stderr, flush=True)
    _print(rows, args.partitions)


def _print(rows: list, partitions: int) -> None:
    stages = ("load", "features", "partition", "embed", "search", "refine", "assign", "write")
    print(f"| nodes | wall s | vs first | {' | '.join(stages)} | peak PSS GiB (all processes) "
          f"| peak used GiB (machine) | driver peak GiB | largest part actor heap GiB (resident) "
          f"| Hits@1 | one-to-one acc |")
    print("|---|---|---|" + "---|" * len(stages) + "---|---|---|---|---|---|")
    base = rows[0][1]
    for n, wall, m, (pss, used), _ in rows:
        sec = " | ".join(f"{m['seconds'].get(s, 0):.1f}" for s in stages)
        parts = [p for p in m["ray"]["processes"] if p["role"].startswith("part ")]
        heap = max((p["private_bytes"] or 0) for p in parts)
        resident = max(p["peak_rss_bytes"] for p in parts)
        print(f"| {n:,} | {wall:.0f} | {wall / base:.1f}x | {sec} | {pss / 2**30:.2f} "
              f"| {used / 2**30:.2f} | {m['peak_rss_bytes'] / 2**30:.2f} "
              f"| {heap / 2**30:.2f} ({resident / 2**30:.2f}) "
              f"| {100 * m['hits@1']:.2f} | {100 * m['accuracy']:.2f} |")
    print(f"\nRay, P = {partitions}. Exact search on a sample of gold sources, same embeddings:\n")
    print("| nodes | sample | exact Hits@1 | run's match | nprobe / nlist | tuned recall@1 |")
    print("|---|---|---|---|---|---|")
    for n, _, _, _, c in rows:
        print(f"| {n:,} | {c['sample']:,} | {c['exact']:.2f} | {c['run']:.2f} "
              f"| {c['nprobe']} / {c['nlist']} | {c['recall']:.2f} |")
    print("\nStages against this machine's bounds (ratio = bound s / actual s):\n")
    print("| nodes | embed s | streamed bound s | gathered bound s | ratio (gathered) "
          "| search s | GEMM bound s | ratio | code lookups /s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, _, _, _, c in rows:
        print(f"| {n:,} | {c['embed_s']:.1f} | {c['streamed_s']:.2f} | {c['gathered_s']:.2f} "
              f"| {c['gathered_s'] / c['embed_s']:.2f} | {c['search_s']:.1f} "
              f"| {c['search_bound_s']:.1f} | {c['search_bound_s'] / c['search_s']:.2f} "
              f"| {c['lookups_per_s'] / 1e9:.1f} G |")

    n0, _, m, _, c = rows[-1]
    _projection(n0, m, c, partitions)


def _projection(n0: int, m: dict, c: dict, partitions: int) -> None:
    """What the same job costs at 10M, 100M and 1B nodes on 8, 64 and 512 H100 GPUs, one part
    actor each, from this run's largest size and its per-part costs: the load
    (:data:`HOST_STAGES`) linearly from its measured seconds, on one host like this one; the
    partition (:data:`SERIAL_STAGES`) likewise, one task a graph; the part actors' CPU stages
    (:data:`PART_STAGES`) from their measured seconds times the measured ``partitions``, as
    ``n / GPUs`` rows each; embed and search from what one H100 did (:data:`H100`): the
    embedding's seconds per node, and the multiply-adds of an IVF search with this run's
    probed fraction of the lists (nlist = sqrt(n)) at the rate its exact search reached,
    divided over the GPUs."""
    f, d = c["nprobe"] / c["nlist"], c["dim"]

    def per_node(stages: tuple[str, ...]) -> float:
        return sum(m["seconds"].get(s, 0.0) for s in stages) / n0

    host, serial = per_node(HOST_STAGES), per_node(SERIAL_STAGES)
    parts = per_node(PART_STAGES) * partitions
    print(f"\nProjection for H100 GPUs (their measured embedding and search rates), from the "
          f"{n0:,} run at P = {partitions}: the load on one host {host * 1e6:.1f} s per 1M "
          f"nodes, the partition {serial * 1e6:.1f} s per 1M nodes, part actors' CPU stages "
          f"{parts * 1e6:.1f} s per 1M nodes of one part, search probes {f:.1%} of the "
          "lists:\n")
    print("| nodes | GPUs | load s (one host) | partition s | part CPU s | embed s | search s "
          "| total s | dominant | target embedding per GPU |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in (10 ** 7, 10 ** 8, 10 ** 9):
        for gpus in (8, 64, 512):
            embed = H100["embed_s_per_node"] * n / gpus
            search = 2 * n * (n ** 0.5 * d + f * n * d) / (gpus * H100["search_flops"])
            share = n * d * 4 / gpus
            fits = "fits" if share <= 0.8 * H100["memory"] else "does not fit"
            stages = {"load": host * n, "partition": serial * n, "part CPU": parts * n / gpus,
                      "embed": embed, "search": search}
            print(f"| {n:,} | {gpus} | {host * n:,.0f} | {serial * n:,.0f} "
                  f"| {parts * n / gpus:,.1f} | {embed:,.2f} | {search:,.0f} "
                  f"| {sum(stages.values()):,.0f} | {max(stages, key=stages.get)} "
                  f"| {share / 1e9:,.1f} GB, {fits} |")

if __name__ == "__main__":
    main()
