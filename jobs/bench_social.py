"""Benchmark social-network alignment with seeds: tfgm-dist against a plain RWR anchor baseline.

    python -m jobs.bench_social                              # everything
    python -m jobs.bench_social --only shared                # the two real social pairs
    python -m jobs.bench_social --only dev --pairs yeast     # development pairs built from yeast
    python -m jobs.bench_social --only attributed            # the same, nodes with bags of words
    python -m jobs.bench_social --only uneven                # one copy keeps 35 % of the nodes
    python -m jobs.bench_social --only full                  # both copies keep every node
    python -m jobs.bench_social --only sparse                # copies sharing few edges
    python -m jobs.bench_social --only counts                # nodes with Poisson counts
    python -m jobs.bench_social --only counts --set features.root_counts=false  # side by side

Prints Markdown tables, one row per pair: sizes, seeds and gold pairs, then Hits@1, Hits@10
(percent) and MRR of

- the RWR baseline (:func:`rwr_baseline`): every node described by its random-walk-with-restart
  scores from every seed, nodes compared by cosine; seconds from loading the files on;
- tfgm-dist as a new user runs it: ``tfgm-dist -q align SOURCE TARGET --out OUT --seeds SEEDS
  --gold GOLD`` in a new process, with no config and no other flag (the library's defaults);
  its ``metrics.json`` read back; seconds are the whole command's wall time.

Protocol (``../shared/data/README.md``, ``social/``): seeds as given; every gold source is
ranked against all target nodes except the seed targets (which tfgm-dist does not offer to
other sources either); a tie with the gold target counts against it.

Pairs: the real ``social/flickr_lastfm`` and ``social/flickr_myspace`` (``--only shared``), and
development pairs (``--only dev``): two partially overlapping noisy copies of one real graph
(:func:`noisy_copies`: fixed random seeds, so every run builds the same pairs) with 20 % of the
true pairs as seeds; ``--only uneven``: one copy keeps every node, the other 35 %; ``--only
full``: both keep every node; ``--only sparse``: each copy drops 30-50 % of the edges, so
the two share few (as two platforms' networks do).
``--set KEY=VALUE`` is passed on to every tfgm-dist run (an ablation beside the defaults).
``--pairs`` keeps the pairs whose name starts with one of its
comma-separated values. On 2 cores the RWR baseline takes about 4 minutes for all pairs
(most of it on the DBP15k ones); tfgm-dist's time is whatever its defaults cost, and a run
longer than ``--timeout`` seconds (default 300) is stopped and reported as such.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from jobs import warn_uncompiled
from jobs.bench_engine import fmt_reliability, undirected

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
ROOT = Path(__file__).resolve().parents[1]

SHARED = ("flickr_lastfm", "flickr_myspace")
# Development pairs: (name, graph file under DATA, [(keep, edge_drop), ...]).
DEV = (
    ("yeast", "yeast_ppi/yeast0_Y2H1.txt", [(0.8, 0.1), (0.8, 0.25), (1.0, 0.25)]),
    ("flickr_lastfm.source", "social/flickr_lastfm/source_edges.tsv", [(0.8, 0.1), (1.0, 0.25)]),
    ("flickr_lastfm.target", "social/flickr_lastfm/target_edges.tsv", [(0.8, 0.1)]),
    ("flickr_myspace.source", "social/flickr_myspace/source_edges.tsv", [(0.8, 0.1)]),
    ("flickr_myspace.target", "social/flickr_myspace/target_edges.tsv", [(0.8, 0.1)]),
    ("dbp15k_zh", "dbp15k/zh_en/triples_1", [(0.8, 0.1), (0.8, 0.25)]),
    ("dbp15k_en", "dbp15k/zh_en/triples_2", [(0.8, 0.1)]),
)
# Attributed development pairs: the same noisy copies, every node with a bag of words.
DEV_ATTRIBUTED = (
    ("yeast", "yeast_ppi/yeast0_Y2H1.txt", [(0.8, 0.25)]),
    ("flickr_lastfm.source", "social/flickr_lastfm/source_edges.tsv", [(0.8, 0.1)]),
    ("dbp15k_zh", "dbp15k/zh_en/triples_1", [(0.8, 0.25)]),
)
# Uneven pairs: one copy keeps every node, the other 35 % (a network against a few of its
# users on another platform), featureless and with 2 of 64 words, with and without seeds.
DEV_UNEVEN = (
    ("yeast", "yeast_ppi/yeast0_Y2H1.txt", [((1.0, 0.35), 0.1)]),
    ("flickr_lastfm.source", "social/flickr_lastfm/source_edges.tsv", [((1.0, 0.35), 0.1)]),
)
# Full copies: every node kept in both, a share of the edges dropped (a network against its
# own noisy copy, as yeast's protocol), with and without seeds.
DEV_FULL = (
    ("yeast", "yeast_ppi/yeast0_Y2H1.txt", [(1.0, 0.1)]),
    ("flickr_lastfm.source", "social/flickr_lastfm/source_edges.tsv", [(1.0, 0.05)]),
    ("dbp15k_zh", "dbp15k/zh_en/triples_1", [(1.0, 0.05)]),
    ("dbp15k_en", "dbp15k/zh_en/triples_2", [(1.0, 0.1)]),
)
# Copies sharing few edges: each drops 30-50 % of them, so a quarter to a half of an edge's
# copies survive in both (two platforms' networks of the same people), with seeds.
DEV_SPARSE = (
    ("yeast", "yeast_ppi/yeast0_Y2H1.txt", [(0.8, 0.5), (0.9, 0.4), ((1.0, 0.35), 0.4)]),
    ("flickr_lastfm.source", "social/flickr_lastfm/source_edges.tsv", [(0.8, 0.3)]),
    ("dbp15k_zh", "dbp15k/zh_en/triples_1", [(0.8, 0.4)]),
    ("dbp15k_en", "dbp15k/zh_en/triples_2", [(0.8, 0.4)]),
    ("dbp15k_fr", "dbp15k/fr_en/triples_1", [((1.0, 0.5), 0.3)]),
)
VOCABULARY, WORDS, WORD_DROP = 1000, 4, 0.25
COUNT_SCALE = 3.0  # the count pairs' mean count of a node's average column
# the attributed pairs' bags, (vocabulary, words per node): 2 of 64 tell few nodes apart
ATTRIBUTES = ((VOCABULARY, WORDS), (64, 2))
DEV_SEED = 0  # rng seed of every development pair
BLOCK_CELLS = 1 << 24  # scores held at once while ranking (gold rows x candidates): 128 MiB


# ---------------------------------------------------------------------------------------------
# The RWR anchor baseline


def _walk_matrix(edges: np.ndarray, num_nodes: int) -> sp.csr_matrix:
    """``P^T`` for the row-stochastic walk ``P = D^-1 A`` on the undirected, unweighted graph.

    Self-loops and repeated edges (either direction) are dropped; a node without edges gets a
    zero column, so a walker there is lost, not kept.
    """
    u, v = edges[edges[:, 0] != edges[:, 1]].T
    a = sp.coo_matrix((np.ones(len(u)), (u, v)), shape=(num_nodes, num_nodes))
    a = ((a + a.T) > 0).astype(np.float64).tocsr()
    degree = np.asarray(a.sum(axis=1)).ravel()
    inverse = np.divide(1.0, degree, out=np.zeros_like(degree), where=degree > 0)
    return (a @ sp.diags(inverse)).tocsr()


def rwr_scores(edges: np.ndarray, num_nodes: int, seeds: np.ndarray, restart: float = 0.15,
               iters: int = 100) -> np.ndarray:
    """``[num_nodes, k]`` random-walk-with-restart scores: column ``j`` is the stationary
    visit probability of a walker that restarts at ``seeds[j]`` with probability ``restart``.

    Power iteration of ``R = restart * E + (1 - restart) * P^T R``; its error shrinks by
    ``1 - restart`` per step (100 steps: 1e-7 of the start). Float64 throughout: on these
    sparse graphs many nodes have nearly equal vectors, and float32 rounding would decide
    which of them ranks first.
    """
    walk = _walk_matrix(edges, num_nodes)
    columns = np.arange(len(seeds))
    scores = np.zeros((num_nodes, len(seeds)))
    scores[seeds, columns] = restart
    for _ in range(iters):
        scores = walk @ scores
        scores *= 1.0 - restart
        scores[seeds, columns] += restart
    return scores


def wl_ceiling(target_edges: np.ndarray, num_targets: int, seed_targets: np.ndarray,
               gold_targets: np.ndarray) -> float:
    """The Hits@1 (percent, ties against the gold) that no method bounded by 1-WL can pass.

    Colour refinement (1-WL) of the target graph, every seed target its own colour, run
    until no class splits: two targets of one colour get equal scores from any message
    passing or random walk from the seeds (this project's layers and refinement, the RWR
    baseline), so a gold target sharing its colour with another candidate (a non-seed target)
    ties with it and cannot rank first. The ceiling is the share of gold targets whose
    colour is their own among the candidates. It bounds what the structure and the seeds
    can tell; node features would lift it.
    """
    import networkx as nx
    graph = nx.Graph()
    graph.add_nodes_from(range(num_targets))
    graph.add_edges_from(target_edges.tolist())
    label = dict.fromkeys(range(num_targets), "")
    label.update((int(t), str(k)) for k, t in enumerate(seed_targets))
    nx.set_node_attributes(graph, label, "seed")
    depth = 8
    while True:  # deepen until the last round splits no class: the stable colouring
        hashes = nx.weisfeiler_lehman_subgraph_hashes(graph, node_attr="seed",
                                                      iterations=depth)
        classes = [len({h[i] for h in hashes.values()}) for i in (-2, -1)]
        if classes[0] == classes[1]:
            break
        depth *= 2
    colour = np.unique([h[-1] for h in hashes.values()], return_inverse=True)[1]
    candidates = np.setdiff1d(np.arange(num_targets), seed_targets)
    size = np.bincount(colour[candidates], minlength=colour.max() + 1)
    return 100.0 * float(np.mean(size[colour[gold_targets]] == 1))


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; an all-zero row (no seed reaches it) stays zero."""
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, norm, out=np.zeros_like(x), where=norm > 0)


def pessimistic_ranks(source: np.ndarray, target: np.ndarray, gold_s: np.ndarray,
                      gold_t: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """Rank of each gold target among ``candidates`` by the dot product of the rows.

    ``rank = 1 + #{other candidates scoring >= the gold}``: ties earn no credit. Scores are
    formed for a block of gold sources at a time so that memory stays at ``BLOCK_CELLS``.
    """
    column = np.full(len(target), -1)
    column[candidates] = np.arange(len(candidates))
    gold_col = column[gold_t]
    if (gold_col < 0).any():
        raise ValueError("a gold target is not among the candidates (is it a seed target?)")
    pool = target[candidates]
    block = max(1, BLOCK_CELLS // max(1, len(candidates)))
    ranks = np.empty(len(gold_s), np.int64)
    for start in range(0, len(gold_s), block):
        rows = slice(start, start + block)
        scores = source[gold_s[rows]] @ pool.T
        gold = scores[np.arange(len(scores)), gold_col[rows]]
        # The gold itself always counts as ">=", which supplies the "1 +".
        ranks[rows] = (scores >= gold[:, None]).sum(axis=1)
    return ranks


def ranking_summary(ranks: np.ndarray) -> dict[str, float]:
    """Hits@1 and Hits@10 in percent, MRR in 0-1."""
    return {"hits@1": 100.0 * float(np.mean(ranks <= 1)),
            "hits@10": 100.0 * float(np.mean(ranks <= 10)),
            "mrr": float(np.mean(1.0 / ranks))}


def rwr_baseline(source_edges: np.ndarray, target_edges: np.ndarray,
                 seeds: tuple[np.ndarray, np.ndarray], gold: tuple[np.ndarray, np.ndarray],
                 restart: float = 0.15, iters: int = 100,
                 num_nodes: tuple[int, int] | None = None,
                 attributes: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
    """The plain training-free anchor baseline: Hits@1, Hits@10 (percent) and MRR.

    Every node of each graph gets its RWR scores from every seed of its side (source seed
    ``seeds[0][k]`` and target seed ``seeds[1][k]`` share column ``k``); a gold source is
    ranked against every target that is not a seed target by cosine similarity, ties counted
    against the gold (:func:`pessimistic_ranks`). A gold pair whose source is a seed is known,
    not predicted, and is left out, as tfgm-dist does (``flickr_lastfm`` lists one pair in
    both files); ``evaluated`` says how many gold pairs count.

    Args:
        source_edges, target_edges: ``[E, 2]`` int arrays of contiguous node numbers.
        seeds, gold: (source numbers, target numbers), as ``tfgm_dist.load.load_pairs`` gives.
        num_nodes: node counts of the two graphs; default: largest number in the edges + 1.
        attributes: node attribute vectors of the two graphs (rows by node number): then a
            pair scores the RWR cosine plus the attribute cosine.
    """
    n_s, n_t = num_nodes or (int(source_edges.max()) + 1, int(target_edges.max()) + 1)
    source = _unit_rows(rwr_scores(source_edges, n_s, seeds[0], restart, iters))
    target = _unit_rows(rwr_scores(target_edges, n_t, seeds[1], restart, iters))
    if attributes is not None:
        source = np.hstack([source, _unit_rows(attributes[0].astype(np.float64))])
        target = np.hstack([target, _unit_rows(attributes[1].astype(np.float64))])
    candidates = np.setdiff1d(np.arange(n_t), seeds[1])
    asked = ~np.isin(gold[0], seeds[0])
    ranks = pessimistic_ranks(source, target, gold[0][asked], gold[1][asked], candidates)
    return {**ranking_summary(ranks), "evaluated": int(asked.sum())}


# ---------------------------------------------------------------------------------------------
# Development pairs


@dataclass(frozen=True)
class DevPair:
    """Two noisy copies of one graph and their true pairs, in the ids written to the files.

    All arrays are ``[rows, 2]`` int64: edges ``(u, v)`` of each copy, and seed and gold pairs
    ``(source id, target id)``.
    """

    source_edges: np.ndarray
    target_edges: np.ndarray
    seeds: np.ndarray
    gold: np.ndarray
    # attributed pairs: ([nodes] ids, [nodes, words] attribute rows) of each copy
    source_attributes: tuple[np.ndarray, np.ndarray] | None = None
    target_attributes: tuple[np.ndarray, np.ndarray] | None = None


def _noisy_copy(edges: np.ndarray, num_nodes: int, rng: np.random.Generator, keep: float,
                edge_drop: float) -> tuple[np.ndarray, np.ndarray]:
    """Induced subgraph on a random node subset, then random edge deletion.

    Returns the surviving edges (original node numbers) and which nodes still have an edge:
    only those exist for a loader that reads the edge list.
    """
    kept = rng.random(num_nodes) < keep
    survives = kept[edges[:, 0]] & kept[edges[:, 1]] & (rng.random(len(edges)) >= edge_drop)
    copy = edges[survives]
    present = np.zeros(num_nodes, bool)
    present[copy.ravel()] = True
    return copy, present


def _disguise(edges: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """New ids by a random permutation, edges shuffled and randomly reversed.

    Returns the edges in new ids and the new id of every original node. Shuffling matters:
    loaders number nodes by first appearance, and two copies listing their edges in the
    original order would get nearly equal numbers for the same node.
    """
    new_id = rng.permutation(int(edges.max()) + 1 if len(edges) else 0)
    flip = rng.random(len(edges)) < 0.5
    edges = np.where(flip[:, None], edges[:, ::-1], edges)[rng.permutation(len(edges))]
    return new_id[edges], new_id


def bags_of_words(num_nodes: int, rng: np.random.Generator, vocabulary: int = VOCABULARY,
                  words: int = WORDS) -> np.ndarray:
    """``[num_nodes, vocabulary]`` 0/1 attribute rows: each node uses ``words`` random words
    of a Zipf-like vocabulary (word ``w`` drawn with weight ``1 / (w + 1)``), so common words
    are shared by many nodes, as tags, venues or interests are."""
    weight = 1.0 / np.arange(1, vocabulary + 1)
    picks = rng.choice(vocabulary, size=(num_nodes, words), p=weight / weight.sum())
    bags = np.zeros((num_nodes, vocabulary), np.float32)
    bags[np.arange(num_nodes)[:, None], picks] = 1.0
    return bags


def _noisy_bags(bags: np.ndarray, rng: np.random.Generator, drop: float = WORD_DROP
                ) -> np.ndarray:
    """One copy's attributes: each word dropped with probability ``drop`` and one random
    word added per node (a profile edited differently on each platform)."""
    noisy = bags * (rng.random(bags.shape) >= drop)
    noisy[np.arange(len(bags)), rng.integers(bags.shape[1], size=len(bags))] = 1.0
    return noisy


def count_rates(num_nodes: int, rng: np.random.Generator, columns: int) -> np.ndarray:
    """``[num_nodes, columns]`` expected counts (papers per venue, posts per topic): a
    node's own Gamma(0.5) profile times each column's log-normal popularity."""
    popularity = np.exp(rng.normal(0.0, 1.0, columns))
    return COUNT_SCALE * rng.gamma(0.5, 1.0, (num_nodes, columns)) * popularity


def noisy_copies(edges: np.ndarray, num_nodes: int, rng: np.random.Generator,
                 keep: float | tuple[float, float] = 0.8, edge_drop: float = 0.1,
                 seed_share: float = 0.2,
                 attributed: bool = False, vocabulary: int = VOCABULARY, words: int = WORDS,
                 counts: int = 0) -> DevPair:
    """A development pair from one real graph: two independent noisy copies of it.

    Each copy is the subgraph induced by the nodes it keeps (each with probability ``keep``,
    or ``keep[0]`` and ``keep[1]`` for the two copies)
    minus each of its edges with probability ``edge_drop``, in its own random ids. The truth
    is every node that has an edge in both copies; a random ``seed_share`` of it are the seeds,
    the rest the gold. ``edges`` is ``[E, 2]`` contiguous node numbers below ``num_nodes``;
    direction and repeated edges are ignored. ``attributed`` gives every node a bag of words
    (:func:`bags_of_words`, ``words`` of ``vocabulary``) and each copy its own noisy version
    of it (:func:`_noisy_bags`); ``counts`` instead gives every node that many expected
    counts (:func:`count_rates`) and each copy its own Poisson draw of them.
    """
    edges = undirected(np.asarray(edges, np.int64))
    keep_a, keep_b = keep if isinstance(keep, tuple) else (keep, keep)
    copy_a, present_a = _noisy_copy(edges, num_nodes, rng, keep_a, edge_drop)
    copy_b, present_b = _noisy_copy(edges, num_nodes, rng, keep_b, edge_drop)
    edges_a, id_a = _disguise(copy_a, rng)
    edges_b, id_b = _disguise(copy_b, rng)
    true = rng.permutation(np.flatnonzero(present_a & present_b))
    pairs = np.stack([id_a[true], id_b[true]], axis=1)
    n_seeds = round(seed_share * len(pairs))
    if not attributed:
        return DevPair(edges_a, edges_b, pairs[:n_seeds], pairs[n_seeds:])
    nodes = [np.flatnonzero(present) for present in (present_a, present_b)]
    if counts:
        rates = count_rates(num_nodes, rng, counts)
        sides = [(id_x[kept], rng.poisson(rates[kept]).astype(np.float32))
                 for id_x, kept in zip((id_a, id_b), nodes)]
        return DevPair(edges_a, edges_b, pairs[:n_seeds], pairs[n_seeds:], *sides)
    bags = bags_of_words(num_nodes, rng, vocabulary, words)
    sides = [(id_x[kept], _noisy_bags(bags[kept], rng))
             for id_x, kept in zip((id_a, id_b), nodes)]
    return DevPair(edges_a, edges_b, pairs[:n_seeds], pairs[n_seeds:], *sides)


def write_pair(pair: DevPair, folder: Path) -> dict[str, Path]:
    """``source_edges.tsv``, ``target_edges.tsv``, ``seeds.tsv``, ``gold.tsv`` in ``folder``
    (tab separated, no header, as under ``social/``); returns the four paths. An attributed
    pair's graphs are Parquet-layout folders ``source/`` and ``target/`` instead (edges, and
    nodes with their ``features``)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for key, array in (("seeds", pair.seeds), ("gold", pair.gold)):
        paths[key] = folder / f"{key}.tsv"
        np.savetxt(paths[key], array, fmt="%d", delimiter="\t")
    for key, edges, attributes in (("source", pair.source_edges, pair.source_attributes),
                                   ("target", pair.target_edges, pair.target_attributes)):
        if attributes is None:
            paths[key] = folder / f"{key}_edges.tsv"
            np.savetxt(paths[key], edges, fmt="%d", delimiter="\t")
            continue
        paths[key] = folder / key
        paths[key].mkdir()
        pq.write_table(pa.table({"src": edges[:, 0], "dst": edges[:, 1]}),
                       paths[key] / "edges.parquet")
        ids, rows = attributes
        pq.write_table(pa.table({"id": ids, "features": list(rows)}),
                       paths[key] / "nodes.parquet")
    return paths


# ---------------------------------------------------------------------------------------------
# Measuring one pair


def shared_paths(name: str) -> dict[str, Path]:
    """The four files of one pair under ``social/``."""
    folder = DATA / "social" / name
    return {"source": folder / "source_edges.tsv", "target": folder / "target_edges.tsv",
            "seeds": folder / "seeds.tsv", "gold": folder / "gold.tsv"}


def build_dev_pair(graph: str, keep: float | tuple[float, float], edge_drop: float, folder: Path,
                   attributed: bool = False, vocabulary: int = VOCABULARY, words: int = WORDS,
                   counts: int = 0) -> dict[str, Path]:
    """Write the development pair of ``graph`` (a path under DATA) with this noise."""
    from tfgm_dist.load import load_graph
    g = load_graph(DATA / graph)
    pair = noisy_copies(g.edge_index.numpy().T, g.num_nodes, np.random.default_rng(DEV_SEED),
                        keep=keep, edge_drop=edge_drop, attributed=attributed,
                        vocabulary=vocabulary, words=words, counts=counts)
    return write_pair(pair, folder)


def run_baseline(paths: dict[str, Path]) -> dict:
    """Load the pair as tfgm-dist does, run :func:`rwr_baseline`; metrics, sizes, seconds."""
    from tfgm_dist.load import load_graph, load_pairs
    start = time.perf_counter()
    g_s, g_t = load_graph(paths["source"]), load_graph(paths["target"])
    seeds = load_pairs(paths["seeds"], g_s, g_t, "seeds")
    gold = load_pairs(paths["gold"], g_s, g_t, "gold")
    attributes = (None if g_s.features is None else
                  (g_s.features.numpy(), g_t.features.numpy()))
    m = rwr_baseline(g_s.edge_index.numpy().T, g_t.edge_index.numpy().T, seeds, gold,
                     num_nodes=(g_s.num_nodes, g_t.num_nodes), attributes=attributes)
    seconds = time.perf_counter() - start
    asked = ~np.isin(gold[0], seeds[0])
    ceiling = wl_ceiling(g_t.edge_index.numpy().T, g_t.num_nodes, seeds[1], gold[1][asked])
    return {**m, "seconds": seconds, "ceiling": ceiling,
            "sizes": (g_s.num_nodes, g_s.num_edges, g_t.num_nodes, g_t.num_edges),
            "seeds": len(seeds[0])}


def run_tfgm(paths: dict[str, Path], out: Path, timeout_s: float, seeds: bool = True,
             sets: tuple[str, ...] = ()) -> dict:
    """``tfgm-dist -q align`` with only the inputs (``--seeds`` only if ``seeds``) and the
    ``--set`` values ``sets``, in a new process; its metrics, or the last line of its error."""
    command = [sys.executable, "-m", "tfgm_dist.cli", "-q", "align", str(paths["source"]),
               str(paths["target"]), "--out", str(out), "--gold", str(paths["gold"]),
               *(["--seeds", str(paths["seeds"])] if seeds else []),
               *(arg for value in sets for arg in ("--set", value))]
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout_s:g} s"}
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return {"error": lines[-1]}
    return {**json.loads((out / "metrics.json").read_text()), "seconds": seconds}


# ---------------------------------------------------------------------------------------------
# Tables

HEADER = ("| pair | source nodes / edges | target nodes / edges | seeds | gold evaluated "
          "| 1-WL ceiling H@1 | RWR H@1 | RWR H@10 | RWR MRR | RWR s "
          "| tfgm H@1 | tfgm est. H@1 (held out) | tfgm H@10 | tfgm MRR | tfgm 1:1 acc. | tfgm s "
          "| H@1 tfgm / RWR | tfgm share correct (rows) at confidence >= 0.5 / 0.8 / 0.9 |")


def _tfgm_cells(m: dict, baseline_h1: float) -> str:
    """The tfgm-dist columns of a row (Hits and accuracy in percent)."""
    if "error" in m:
        return f"failed: {m['error'][:100].replace('|', '/')} | | | | | | |"
    h1 = 100 * m["hits@1"]  # metrics.json: rates in [0, 1]; this table: percent
    estimate = m.get("estimate")
    est = (f"{100 * estimate['hits@1']:.1f} ({estimate.get('held_out', '?')})"
           if isinstance(estimate, dict) and "hits@1" in estimate else "-")
    acc = f"{100 * m['accuracy']:.1f}" if "accuracy" in m else "-"
    ratio = f"{h1 / baseline_h1:.1f}x" if baseline_h1 > 0 else "-"
    return (f"{h1:.1f} | {est} | {100 * m['hits@10']:.1f} | {m['mrr']:.3f} | {acc} | "
            f"{m['seconds']:.1f} | {ratio} | {fmt_reliability(m)}")


def print_row(name: str, base: dict, tfgm: dict, seeds: bool = True) -> None:
    """One row; without ``seeds`` tfgm-dist ran without them, and the RWR baseline, which
    needs them, is left out (its cells "-")."""
    n_s, e_s, n_t, e_t = base["sizes"]
    rwr = (f"{base['hits@1']:.1f} | {base['hits@10']:.1f} | {base['mrr']:.3f} | "
           f"{base['seconds']:.1f}" if seeds else "- | - | - | -")
    ceiling = f"{base['ceiling']:.1f}" if seeds else "-"  # colours of the seed targets
    print(f"| {name} | {n_s:,} / {e_s:,} | {n_t:,} / {e_t:,} | {base['seeds'] if seeds else 0:,} "
          f"| {base['evaluated']:,} | {ceiling} | {rwr} | "
          f"{_tfgm_cells(tfgm, base['hits@1'] if seeds else 0.0)} |",
          flush=True)


def _print_header(title: str) -> None:
    print(f"\n### {title}\n", flush=True)
    print(HEADER)
    print("|" + "---|" * HEADER.count(" | ") + "---|", flush=True)


def bench_shared(selected: list[str], tmp: Path, timeout_s: float, sets: tuple[str, ...] = ()
                 ) -> None:
    _print_header("Real social pairs (Hits in %, every gold source ranked against all "
                  "non-seed targets, ties against the gold)")
    for name in SHARED:
        if _wanted(name, selected):
            paths = shared_paths(name)
            print_row(name, run_baseline(paths),
                      run_tfgm(paths, tmp / "out" / name, timeout_s, sets=sets))


@dataclass(frozen=True)
class DevSet:
    """One ``--only`` set of development pairs: its table's title, its pairs (as
    :data:`DEV`), the bags of words each pair is built with (``(vocabulary, words)``;
    ``(0, 0)``: none), whether each pair also gets a row run without ``--seeds``, and the
    widths of count vectors each pair is built with instead of bags."""

    title: str
    pairs: tuple
    bags: tuple[tuple[int, int], ...]
    unseeded: bool
    counts: tuple[int, ...] = ()


DEV_SETS = {
    "dev": DevSet(f"Development pairs: two noisy copies of one graph (keep = node kept per "
                  f"copy, drop = edge dropped per copy; 20 % of the true pairs are seeds; "
                  f"rng seed {DEV_SEED})", DEV, ((0, 0),), False),
    "attributed": DevSet(
        f"Attributed development pairs: as below, and every node has a bag of w of v "
        f"Zipf-distributed words (+wofvwords), each copy dropping each word with probability "
        f"{WORD_DROP:g} and adding one at random; the baseline adds the attribute cosine to "
        f"the RWR cosine; the rows 'no seeds' ran tfgm-dist without --seeds (gold ranked "
        f"against every target)", DEV_ATTRIBUTED, ATTRIBUTES, True),
    "uneven": DevSet("Uneven development pairs: one copy keeps every node, the other 35 % "
                     "(keep = source-target), featureless and with 2 of 64 words per node "
                     "(+2of64words); the rows 'no seeds' ran without --seeds", DEV_UNEVEN,
                     ((0, 0), ATTRIBUTES[1]), True),
    "sparse": DevSet("Sparse development pairs: each copy drops 30-50 % of the edges (keep = "
                     "node kept per copy, or source-target)", DEV_SPARSE, ((0, 0),), False),
    "full": DevSet("Full development pairs: both copies keep every node, each drops a share of "
                   "the edges; the rows 'no seeds' ran without --seeds", DEV_FULL, ((0, 0),),
                   True),
    "counts": DevSet(
        f"Development pairs with counts: as the attributed pairs, but every node has c expected "
        f"counts (+ccounts; Gamma(0.5) profiles times log-normal column popularity, mean "
        f"{COUNT_SCALE:g}) and each copy its own Poisson draw of them", DEV_ATTRIBUTED, (), True,
        (17, 100)),
}


def bench_dev(selected: list[str], tmp: Path, timeout_s: float, which: str,
              sets: tuple[str, ...] = ()) -> None:
    """The rows of the development pairs of ``DEV_SETS[which]``."""
    dev = DEV_SETS[which]
    _print_header(dev.title)
    attributes = [(v, w, 0) for v, w in dev.bags] + [(0, 0, c) for c in dev.counts]
    for graph, path, settings in dev.pairs:
        for (keep, drop), (vocabulary, words, counts) in itertools.product(settings, attributes):
            kept = "-".join(f"{k:g}" for k in keep) if isinstance(keep, tuple) else f"{keep:g}"
            name = (f"{graph}/keep{kept}-drop{drop:g}"
                    + (f"+{words}of{vocabulary}words" if words else "")
                    + (f"+{counts}counts" if counts else ""))
            if not _wanted(name, selected):
                continue
            if not (DATA / path).exists():
                print(f"| {name} | not found: {DATA / path} |", flush=True)
                continue
            folder = name.replace("/", "-")
            paths = build_dev_pair(path, keep, drop, tmp / "dev" / folder,
                                   words > 0 or counts > 0, vocabulary, words, counts)
            base = run_baseline(paths)
            print_row(name, base, run_tfgm(paths, tmp / "out" / folder, timeout_s, sets=sets))
            if dev.unseeded:
                print_row(name + " no seeds", base,
                          run_tfgm(paths, tmp / "out" / (folder + "-unseeded"), timeout_s,
                                   seeds=False, sets=sets), seeds=False)


def _wanted(name: str, selected: list[str]) -> bool:
    return not selected or any(name.startswith(s) for s in selected)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("shared", *DEV_SETS))
    p.add_argument("--pairs", default="",
                   help="comma-separated name prefixes, e.g. flickr_myspace,yeast/keep0.8")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds one tfgm-dist run may take before its row says so")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="passed on to every tfgm-dist run, e.g. features.root_counts=false")
    args = p.parse_args()
    if not (DATA / "social").exists():
        sys.exit(f"benchmark data not found: {DATA / 'social'} is missing")
    selected = [s for s in args.pairs.split(",") if s]
    print(f"machine: {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)")
    warn_uncompiled()
    with tempfile.TemporaryDirectory(prefix="bench-social-") as tmp:
        if args.only in (None, "shared"):
            bench_shared(selected, Path(tmp), args.timeout, tuple(args.set))
        for which in DEV_SETS:
            if args.only in (None, which):
                bench_dev(selected, Path(tmp), args.timeout, which, tuple(args.set))


if __name__ == "__main__":
    main()
