"""A deterministic synthetic alignment task: a power-law graph and a noisy, permuted copy.

Used by ``tfgm-dist demo`` (no external data) and by the scale benchmarks. The source is a
Chung–Lu graph with Pareto-distributed expected degrees; the target drops a fraction of the
source's edges, adds as many random ones, renames every node through a seeded permutation
and adds Gaussian noise to the node features (``feature_dim = 0``: no features, a
structure-only pair). Written in the Parquet input layout, so the same input can be reused.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import InputError


def chung_lu(n: int, mean_degree: float, rng: np.random.Generator,
             exponent: float = 2.5) -> np.ndarray:
    """``[2, E]`` undirected edges (``u < v``, no duplicates) with power-law degrees."""
    weights = rng.pareto(exponent - 1, n) + 1
    p = weights / weights.sum()
    m = int(n * mean_degree / 2)
    ends = rng.choice(n, size=(2, int(m * 1.1) + 16), p=p)
    u, v = ends.min(0), ends.max(0)
    key = np.unique((u * n + v)[u != v])
    key = key[rng.permutation(key.size)[:m]]
    return np.stack([key // n, key % n])


def synthetic_pair(n: int = 20000, *, mean_degree: float = 10.0, edge_noise: float = 0.05,
                   feature_dim: int = 128, feature_noise: float = 0.5, seed: int = 0
                   ) -> tuple[dict, dict, pa.Table]:
    """Source and target as ``{"edges": pa.Table, "nodes": pa.Table}`` plus the gold pairs.

    Ids are strings (``s…`` in the source, ``t…`` in the target); the target's numbering
    is a seeded permutation of the source's, so the gold pairs are not the identity.
    """
    if n < 2 or mean_degree <= 0 or feature_dim < 0 or not 0 <= edge_noise <= 1 \
            or feature_noise < 0:
        raise InputError(f"synthetic pair: nodes >= 2, mean degree > 0, feature dim >= 0, "
                         f"edge noise in [0, 1] and feature noise >= 0 (got {n}, {mean_degree}, "
                         f"{feature_dim}, {edge_noise}, {feature_noise})")
    rng = np.random.default_rng(seed)
    edges = chung_lu(n, mean_degree, rng)
    m = edges.shape[1]
    kept = edges[:, rng.permutation(m)[: m - int(edge_noise * m)]]
    added = chung_lu(n, mean_degree * edge_noise, rng)
    perm = rng.permutation(n)  # source node i is target node perm[i]
    t_edges = perm[np.concatenate([kept, added], axis=1)]
    x = rng.standard_normal((n, feature_dim)).astype(np.float32)
    x_t = np.empty_like(x)
    x_t[perm] = x + feature_noise * rng.standard_normal(x.shape).astype(np.float32)
    s_ids = np.char.add("s", np.arange(n).astype(str))
    t_ids = np.char.add("t", np.arange(n).astype(str))

    def graph(ids: np.ndarray, e: np.ndarray, feats: np.ndarray) -> dict:
        nodes = {"id": pa.array(ids)}
        if feature_dim:
            nodes["features"] = pa.FixedSizeListArray.from_arrays(pa.array(feats.ravel()),
                                                                  feature_dim)
        return {"edges": pa.table({"src": pa.array(ids[e[0]]), "dst": pa.array(ids[e[1]])}),
                "nodes": pa.table(nodes)}

    gold = pa.table({"source_id": pa.array(s_ids), "target_id": pa.array(t_ids[perm])})
    return graph(s_ids, edges, x), graph(t_ids, t_edges, x_t), gold


def write_pair(out: str | Path, n: int = 20000, seed: int = 0, **options) -> dict[str, Path]:
    """Write ``source/``, ``target/`` (Parquet layout) and ``gold.parquet`` under ``out``."""
    out = Path(out)
    source, target, gold = synthetic_pair(n, seed=seed, **options)
    paths = {"source": out / "source", "target": out / "target", "gold": out / "gold.parquet"}
    for name, g in (("source", source), ("target", target)):
        paths[name].mkdir(parents=True, exist_ok=True)
        pq.write_table(g["edges"], paths[name] / "edges.parquet")
        pq.write_table(g["nodes"], paths[name] / "nodes.parquet")
    pq.write_table(gold, paths["gold"])
    return paths
