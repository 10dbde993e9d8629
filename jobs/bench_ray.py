"""Benchmark the Ray pipeline against the single-process run, on this machine.

    python -m jobs.bench_ray                                  # DBP15k + synthetic 100k and 1M
    python -m jobs.bench_ray --only synth --sizes 100000 --partitions 1,2,4
    python -m jobs.bench_ray --only synth --sizes 100000 --partitions 2 --seeds 0.1
    python -m jobs.bench_ray --only dbp15k --pairs zh_en
    python -m jobs.bench_ray --only dbp15k --pairs zh_en --layout structure   # no names
    python -m jobs.bench_ray --only synth --sizes 1000000 --partitions ""   # one process only
    python -m jobs.bench_ray --only auction --partitions 2,4
    python -m jobs.bench_ray --only partition --sizes 1000000 --partitions 2,4

Every run is the real command, ``tfgm-dist align [--partitions P]``, in a new process that
starts its own local Ray cluster (the start is part of the wall time, as it is for a user).
Prints one Markdown table per input: wall seconds, seconds per stage, Hits@1, the peak RSS
of the driver and of the largest Ray process, the largest private memory of a Ray process
(its resident set without the object store's pages, ``private_bytes``), the sum of the peaks
over all Ray processes, and the overhead against the single-process run.

- DBP15k: the protocol of ``bench_engine`` (seeds, ranked against the test targets) with no
  config file: refinement and the one-to-one auction on the part actors; ``--layout`` one of
  ``bench_engine``'s (the translated names by default, ``structure`` the triples alone).
- Synthetic: ``tfgm-dist synth`` pairs (power-law degrees, mean degree 10, 5 % edge noise,
  128-wide noisy features) with no config file, as a new user runs them (above 200,000
  nodes: IVF with nprobe tuned on the merged shards, no refinement, the one-to-one auction
  on the part actors).
- Auction: :func:`tfgm_dist.distributed.one_to_one` over P actors against
  :func:`tfgm_dist.assign.sparse_one_to_one` in this process, on random candidate lists
  (:func:`lists`) whose scores are continuous or take 5 values (tied: thousands of rounds);
  seconds, rounds (the first ``ROUNDS_ON_PARTS`` on the parts, then the whole auction again
  in actor 0), and whether the matchings are equal.
- Partition: the edges each partitioner of :mod:`tfgm_dist.partition` cuts, and its seconds,
  on the source graphs of yeast (0 % noise) and of the synthetic pairs, against METIS.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import time

import numpy as np
import pyarrow.parquet as pq
import ray
import torch

from jobs import warn_uncompiled
from jobs.bench_engine import DATA, LAYOUTS, protocol_args, run_cli
from tfgm_dist.search import Candidates

STAGES = ("load", "estimate", "bootstrap", "features", "partition", "embed", "search",
          "refine+assign", "refine", "assign", "write")


def _row(label: str, wall: float, m: dict, base: float | None) -> str:
    seconds = " ".join(f"{k} {m['seconds'][k]:.1f}" for k in STAGES if k in m["seconds"])
    procs = m.get("ray", {}).get("processes", [])
    largest = max((p["peak_rss_bytes"] for p in procs), default=0)
    private = max((p.get("private_bytes") or 0 for p in procs), default=0)
    total = m["peak_rss_bytes"] + sum(p["peak_rss_bytes"] for p in procs)
    over = "-" if base is None else f"{wall - base:+.1f} s ({wall / base:.2f}x)"
    return (f"| {label} | {wall:.1f} | {over} | {seconds} | {100 * m['hits@1']:.2f} | "
            f"{100 * m.get('accuracy', float('nan')):.2f} | {m['peak_rss_bytes'] / 2**30:.2f} | "
            f"{largest / 2**30:.2f} | {private / 2**30:.2f} | {total / 2**30:.2f} |")


def _table(title: str, args: list[str], partitions: list[int], out: Path) -> None:
    print(f"\n### {title}\n")
    print("| run | wall s | overhead vs 1 process | seconds per stage | Hits@1 | 1:1 acc. "
          "| driver GiB | largest Ray process GiB | its own memory, largest GiB "
          "| all processes GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for p in [0, *partitions]:
        extra = ["--partitions", str(p)] if p else []
        wall, m = run_cli([*args, "--out", str(out / f"p{p}"), *extra])
        print(_row("1 process" if p == 0 else f"Ray, P = {p}", wall, m, base), flush=True)
        base = base or wall


def bench_dbp(pairs: list[str], partitions: list[int], layout: str) -> None:
    prepare, title = LAYOUTS[layout]
    for pair in pairs:
        with tempfile.TemporaryDirectory() as tmp:
            p = prepare(pair, Path(tmp) / "in")
            _table(f"DBP15k {pair} (seeds, no config{title})",
                   protocol_args(p) + ["--seeds", str(p["seeds"])], partitions, Path(tmp))


def synth(folder: str, n: int) -> None:
    """``tfgm-dist synth FOLDER --nodes n``: a synthetic pair of ``n`` nodes each."""
    subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "synth", folder, "--nodes",
                    str(n)], check=True, stdout=subprocess.DEVNULL)


def bench_synth(sizes: list[int], partitions: list[int], seeds: float) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            synth(f"{tmp}/in", n)
            args = [f"{tmp}/in/source", f"{tmp}/in/target", "--gold", f"{tmp}/in/gold.parquet"]
            title = f"Synthetic pair, {n:,} nodes each (no config)"
            if seeds:
                gold = pq.read_table(f"{tmp}/in/gold.parquet")
                pq.write_table(gold.slice(0, int(seeds * gold.num_rows)), f"{tmp}/seeds.parquet")
                args += ["--seeds", f"{tmp}/seeds.parquet"]
                title += f", the first {seeds:.0%} of the gold pairs as seeds"
            _table(title, args, partitions, Path(tmp))


def lists(n_s: int, n_t: int, k: int, levels: int, seed: int) -> Candidates:
    """Random candidate lists: ``k`` distinct targets of ``n_t`` per source, scores uniform in
    [0, 1] and rounded to ``levels + 1`` values (unrounded for 0), 5 % of entries ``-inf``
    (not edges). Rounded, many sources tie on the same targets, and the auction takes
    hundreds to thousands of rounds."""
    g = torch.Generator().manual_seed(seed)
    index = torch.randint(n_t, (n_s, k), generator=g)
    while True:  # redraw the rows that name a target twice (a randperm per row is O(n_s n_t))
        ordered = index.sort(dim=1).values
        twice = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1).nonzero().flatten()
        if not len(twice):
            break
        index[twice] = torch.randint(n_t, (len(twice), k), generator=g)
    scores = torch.rand(n_s, k, generator=g)
    if levels:
        scores = (scores * levels).round() / levels
    scores[torch.rand(n_s, k, generator=g) < 0.05] = -torch.inf
    return Candidates.sorted(scores, index)


AUCTIONS = (("untied, 100,000 x 10", 100_000, 0), ("tied (5 levels), 2,000 x 10", 2_000, 4))


def bench_auction(partitions: list[int]) -> None:
    from tfgm_dist.assign import sparse_one_to_one
    from tfgm_dist.distributed import ROUNDS_ON_PARTS, connect, one_to_one
    from tfgm_dist.distributed.actors import AuctionSide

    connect("")
    cpus = ray.cluster_resources().get("CPU", 1)
    print("\n### The one-to-one auction on Ray against one process\n")
    print("| lists | run | seconds | rounds (on the parts + handed over) | equal to one process |")
    print("|---|---|---|---|---|")
    for label, n, levels in AUCTIONS:
        c = lists(n, n, 10, levels, seed=0)
        start = time.perf_counter()
        one = sparse_one_to_one(c, n).numpy()
        print(f"| {label} | 1 process | {time.perf_counter() - start:.2f} | - | - |", flush=True)
        for P in partitions:
            sides = [ray.remote(AuctionSide).options(num_cpus=cpus / P).remote(f"part {q}")
                     for q in range(P)]
            ray.get([s.__ray_ready__.remote() for s in sides])  # started: not timed
            rows = [[np.arange(q, n, P)] for q in range(P)]
            chunks = [[ray.put((c.scores[r[0]].numpy(), c.index[r[0]].numpy()))] for r in rows]
            home = np.arange(n) % P
            start = time.perf_counter()
            rounds = one_to_one(sides, chunks, rows, n, home)
            took = time.perf_counter() - start
            got = np.empty(n, dtype=np.int64)
            for q, side in enumerate(sides):
                got[rows[q][0]] = ray.get(side.matched.remote())
            split = (f"{ROUNDS_ON_PARTS} + {rounds - ROUNDS_ON_PARTS}"
                     if rounds > ROUNDS_ON_PARTS else str(rounds))
            print(f"| {label} | Ray, P = {P} | {took:.2f} | {split} | "
                  f"{np.array_equal(got, one)} |", flush=True)
            for side in sides:
                ray.kill(side)
    ray.shutdown()


def bench_partition(sizes: list[int], partitions: list[int]) -> None:
    from tfgm_dist.load import load_graph
    from tfgm_dist.partition import partition

    print("\n### Edges cut by each partitioner\n")
    print("| graph | nodes | edges | P | partitioner | edges cut | share cut | seconds "
          "| nodes per part |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        graphs = [("yeast", DATA / "yeast_ppi" / "yeast0_Y2H1.txt")]
        for n in sizes:
            synth(f"{tmp}/{n}", n)
            graphs.append((f"synthetic {n:,}", Path(f"{tmp}/{n}/source")))
        for name, path in graphs:
            if not path.exists():
                print(f"| {name} | not found at {path} |||||||")
                continue
            g = load_graph(path)
            for P in partitions:
                for method in ("metis", "streaming", "rcm"):
                    start = time.perf_counter()
                    pt = partition(g.edge_index, g.num_nodes, P, method=method)
                    took = time.perf_counter() - start
                    cut = pt.cut_edges(g.edge_index)
                    per_part = np.bincount(pt.part, minlength=P)
                    print(f"| {name} | {g.num_nodes:,} | {g.num_edges:,} | {P} | {method} | "
                          f"{cut:,} | {100 * cut / g.num_edges:.1f} % | {took:.1f} | "
                          f"{per_part.min():,}..{per_part.max():,} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("dbp15k", "synth", "auction", "partition"))
    p.add_argument("--pairs", default="zh_en,ja_en,fr_en")
    p.add_argument("--layout", choices=sorted(LAYOUTS), default="translated",
                   help="dbp15k: the inputs, as bench_engine prepares them")
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--seeds", type=float, default=0.0,
                   help="synth: this share of the gold pairs given as seeds")
    p.add_argument("--partitions", default="1,2,4")
    args = p.parse_args()
    partitions = [int(x) for x in args.partitions.split(",") if x]  # "": one process only
    print(f"machine: {os.cpu_count()} cores, torch threads "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')}")
    warn_uncompiled()
    if args.only in (None, "dbp15k"):
        if not DATA.exists():
            sys.exit(f"benchmark data not found at {DATA}")
        bench_dbp(args.pairs.split(","), partitions, args.layout)
    if args.only in (None, "synth"):
        bench_synth([int(x) for x in args.sizes.split(",")], partitions, args.seeds)
    if args.only in (None, "auction"):
        bench_auction(partitions)
    if args.only in (None, "partition"):
        bench_partition([int(x) for x in args.sizes.split(",")], partitions)


if __name__ == "__main__":
    main()
