"""Benchmark supervised TFGMws (the kNN label features) against unsupervised TFGM.

    python -m jobs.bench_supervised              # both benchmarks, 3 seeds (about 3 min on 2 cores)
    python -m jobs.bench_supervised --only keypoints --seeds 5

Prints Markdown tables. Protocols:

- Yeast PPI (``../shared/data/yeast_ppi``): the labelled collection is yeast0, yeast10 and
  yeast20, each renumbered by its own seeded permutation, labelled by protein id. The pairs
  yeast5 -> yeast15 and yeast5 -> yeast25 are matched (target renumbered by the run's seed,
  as ``load_pair`` does) unsupervised with ``jobs/configs/yeast.toml`` and supervised with
  ``jobs/configs/supervised-yeast.toml`` (the same settings plus ``[supervised]``). Metric: node
  correctness of the Hungarian assignment; mean ± std over the seeds.
- Synthetic keypoints (:mod:`tfgm_dist.geometric`): per category a random template of 12
  points in the unit square; every graph is an instance (jitter 0.03, rotation within ±30°,
  random scale and shift, coordinates normalised, Delaunay edges, coordinates the only
  features). Per category 20 labelled instances form the collection and 50 pairs of instances
  with 4 outliers each are matched (argmax, as the paper's keypoint protocol). Metric:
  accuracy over the source's keypoints; each seed draws new categories; mean ± std over
  seeds of the per-seed accuracy. Embeddings: the project's weight-free GNN (``sum``
  operator, 3 layers; it sees no edge attributes) and :class:`RandomGMM` (3 random-weight
  GMMConv layers of width 128 on the Cartesian edge attributes).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from tfgm_dist.config import from_dict, load_config, with_overrides
from tfgm_dist.geometric import RandomGMM, keypoint_graph
from tfgm_dist.load import load_graph
from tfgm_dist.pipeline import Pair, align, load_pair
from tfgm_dist.supervised import Collection, align_labelled, align_supervised, match_vectors

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
YEAST = DATA / "yeast_ppi"
CONFIGS = Path(__file__).resolve().parent / "configs"

LABELLED = (0, 10, 20)  # yeast{p} graphs of the collection
PAIRS = ((5, 15), (5, 25))

KEYPOINTS = dict(points=12, outliers=4, jitter=0.03, max_rotation=np.pi / 6, categories=5,
                 labelled=20, pairs=50)
KEYPOINT_CONFIG = {"features": {"kind": "given"}, "embed": {"layers": 3, "operator": "sum"},
                   "search": {"k": 12}, "supervised": {"k": 10, "match": "argmax"}}


def _yeast(p: int):
    return load_graph(YEAST / f"yeast{p}_Y2H1.txt")


def yeast_collection(seed: int) -> Collection:
    """yeast{0,10,20}, each in its own seeded node order, labelled by protein id."""
    graphs = []
    for p in LABELLED:
        g = _yeast(p)
        gen = torch.Generator().manual_seed(1000 * seed + p)
        graphs.append(g.permuted(torch.randperm(g.num_nodes, generator=gen)))
    return Collection.of(graphs, [g.ids.cast("string").to_pylist() for g in graphs],
                         [f"yeast{p}" for p in LABELLED], "yeast collection")


def bench_yeast(seeds: int) -> None:
    unsup_cfg = load_config(CONFIGS / "yeast.toml")
    sup_cfg = load_config(CONFIGS / "supervised-yeast.toml")
    acc = {(pair, kind): [] for pair in PAIRS for kind in ("unsup", "sup")}
    secs = {kind: [] for kind in ("unsup", "sup")}
    for seed in range(seeds):
        collection = yeast_collection(seed)
        for s, t in PAIRS:
            source = _yeast(s)
            for kind, base in (("unsup", unsup_cfg), ("sup", sup_cfg)):
                cfg = with_overrides(base, seed=seed)
                start = time.perf_counter()
                pair = load_pair(source, YEAST / f"yeast{t}_Y2H1.txt", cfg)
                gold = tuple(g.index_of(source.ids, "gold") for g in (pair.source, pair.target))
                pair = Pair(pair.source, pair.target, gold=gold)
                result = (align(pair, cfg) if kind == "unsup"
                          else align_supervised(pair, collection, cfg))
                secs[kind].append(time.perf_counter() - start)
                acc[(s, t), kind].append(100 * result.metrics["accuracy"])
    print(f"\n### Yeast PPI: supervised through yeast{', yeast'.join(map(str, LABELLED))} "
          f"vs unsupervised (node correctness %, Hungarian, {seeds} seeds)\n")
    print("| pair | unsupervised (yeast.toml) | supervised (supervised-yeast.toml) | gain |")
    print("|---|---|---|---|")
    for s, t in PAIRS:
        u, v = np.array(acc[(s, t), "unsup"]), np.array(acc[(s, t), "sup"])
        print(f"| yeast{s} -> yeast{t} | {_pm(u)} | {_pm(v)} | {_pm(v - u, sign=True)} |")
    print(f"\nSeconds per run (load + all stages; supervised embeds the 3,012-node collection "
          f"too): unsupervised {np.mean(secs['unsup']):.1f}, supervised "
          f"{np.mean(secs['sup']):.1f}.")


def bench_keypoints(seeds: int) -> None:
    kp, cfg = KEYPOINTS, from_dict(KEYPOINT_CONFIG)
    gmm = RandomGMM(2, 128, cfg.embed.layers, seed=0)
    methods = ("tfgm", "tfgm+knn", "gmm", "gmm+knn")
    acc = {m: [] for m in methods}
    secs = {m: 0.0 for m in methods}
    pairs = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        hits = {m: [] for m in methods}
        for c in range(kp["categories"]):
            template = rng.uniform(0, 1, (kp["points"], 2))

            def instance(outliers: int):
                return keypoint_graph(template, rng, jitter=kp["jitter"], outliers=outliers,
                                      max_rotation=kp["max_rotation"])

            labelled = [instance(0) for _ in range(kp["labelled"])]
            collection = Collection.of([x.graph for x in labelled],
                                       [x.keypoint.astype(str).tolist() for x in labelled],
                                       [f"c{c}-{i}" for i in range(len(labelled))])
            o_c = torch.cat([gmm.embed(x.graph) for x in labelled])
            for _ in range(kp["pairs"]):
                a, b = instance(kp["outliers"]), instance(kp["outliers"])
                inliers = np.flatnonzero(a.keypoint >= 0)
                node_of = {k: j for j, k in enumerate(b.keypoint)}
                gold = (inliers, np.array([node_of[a.keypoint[i]] for i in inliers]))
                pair = Pair(a.graph, b.graph, gold=gold)
                runs = {
                    "tfgm": lambda: align(pair, cfg),
                    "tfgm+knn": lambda: align_supervised(pair, collection, cfg),
                    "gmm": lambda: match_vectors(pair, gmm.embed(a.graph), gmm.embed(b.graph), cfg),
                    "gmm+knn": lambda: align_labelled(pair, collection, o_c, gmm.embed(a.graph),
                                                      gmm.embed(b.graph), cfg),
                }
                for m, fn in runs.items():
                    start = time.perf_counter()
                    hits[m].append(100 * fn().metrics["accuracy"])
                    secs[m] += time.perf_counter() - start
                pairs += 1
        for m in methods:
            acc[m].append(np.mean(hits[m]))
    print(f"\n### Synthetic keypoints (accuracy %, argmax, {seeds} seeds x "
          f"{kp['categories']} categories x {kp['pairs']} pairs; collection "
          f"{kp['labelled']} labelled graphs per category, kNN k = {cfg.supervised.k})\n")
    print("| embedding | without kNN | with kNN | gain | ms per pair (without / with kNN) |")
    print("|---|---|---|---|---|")
    for name, m in (("weight-free GNN (sum, no edge attributes)", "tfgm"),
                    ("random-weight GMMConv on Cartesian edge attributes", "gmm")):
        u, v = np.array(acc[m]), np.array(acc[m + "+knn"])
        print(f"| {name} | {_pm(u)} | {_pm(v)} | {_pm(v - u, sign=True)} | "
              f"{1000 * secs[m] / pairs:.0f} / {1000 * secs[m + '+knn'] / pairs:.0f} |")


def _pm(x: np.ndarray, sign: bool = False) -> str:
    return f"{x.mean():{'+' if sign else ''}.1f} ± {x.std():.1f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("yeast", "keypoints"))
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    logging.disable(logging.INFO)
    start = time.perf_counter()
    print(f"machine: {os.cpu_count()} cores, torch threads "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')}")
    if args.only in (None, "yeast"):
        if not YEAST.exists():
            sys.exit(f"yeast benchmark data not found at {YEAST}")
        bench_yeast(args.seeds)
    if args.only in (None, "keypoints"):
        bench_keypoints(args.seeds)
    print(f"\nwall time {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
