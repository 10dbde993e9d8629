"""Geometric graphs: Delaunay edges, Cartesian pseudo-coordinates, the random-weight GMMConv
network and the synthetic keypoint task, with the kNN step on top (real PyG, real FAISS)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tfgm_dist.config import from_dict
from tfgm_dist.geometric import RandomGMM, cartesian, delaunay_edges, keypoint_graph
from tfgm_dist.pipeline import Pair
from tfgm_dist.supervised import Collection, align_labelled, match_vectors


def test_delaunay_of_a_square_with_centre():
    pos = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.5, 0.5]])
    edges = {tuple(e) for e in delaunay_edges(pos).T.tolist()}
    sides = {(0, 1), (1, 2), (2, 3), (0, 3)}
    spokes = {(v, 4) for v in range(4)}
    expected = sides | spokes
    assert edges == expected | {(v, u) for u, v in expected}  # both directions, no diagonal


def test_delaunay_is_planar_and_rejects_bad_shapes():
    pos = torch.rand(40, 2, generator=torch.Generator().manual_seed(0))
    e = delaunay_edges(pos)
    assert e.size(1) // 2 <= 3 * 40 - 6 and (e[0] != e[1]).all()
    with pytest.raises(ValueError, match=r"pos must be \[N, 2\] points, got shape \(40, 3\)"):
        delaunay_edges(torch.rand(40, 3))


def test_cartesian_pseudo_coordinates():
    pos = torch.tensor([[0.0, 0.0], [2.0, 1.0]])
    e = torch.tensor([[0, 1], [1, 0]])
    attr = cartesian(pos, e)  # (p_j - p_i) / (2 max|.|) + 1/2, j = source
    assert attr.tolist() == [[0.0, 0.25], [1.0, 0.75]]


def points(seed: int = 0, n: int = 15):
    rng = np.random.default_rng(seed)
    return keypoint_graph(rng.uniform(0, 1, (n, 2)), rng, outliers=3)


def test_random_gmm_shapes_norms_and_determinism():
    g = points().graph
    out = RandomGMM(2, 16, 3, seed=1).embed(g)
    assert out.shape == (18, 2 + 3 * 16)
    blocks = [out[:, :2]] + list(out[:, 2:].split(16, dim=1))
    for b in blocks:
        assert torch.allclose(b.norm(dim=1), torch.ones(18), atol=1e-5)
    assert torch.equal(out, RandomGMM(2, 16, 3, seed=1).embed(g))
    assert not torch.allclose(out, RandomGMM(2, 16, 3, seed=2).embed(g))


def test_random_gmm_reads_edge_attributes_and_is_permutation_equivariant():
    g = points().graph
    net = RandomGMM(2, 16, 2)
    attr = cartesian(g.features, g.edge_index)
    out = net(g.features, g.edge_index, attr)
    assert not torch.allclose(out[:, 2:], net(g.features, g.edge_index, 1 - attr)[:, 2:])
    perm = torch.randperm(g.num_nodes, generator=torch.Generator().manual_seed(3))
    h = g.permuted(perm)
    assert torch.allclose(net.embed(h), out[perm], atol=1e-5)
    with pytest.raises(ValueError, match="edge_attr must be"):
        net(g.features, g.edge_index, attr[:, :1])


def test_keypoint_graph_instances():
    rng = np.random.default_rng(0)
    template = rng.uniform(0, 1, (10, 2))
    kp = keypoint_graph(template, rng, outliers=4, max_rotation=math.pi)
    assert kp.graph.num_nodes == 14 and (kp.keypoint == -1).sum() == 4
    assert sorted(kp.keypoint[kp.keypoint >= 0].tolist()) == list(range(10))
    assert kp.keypoint.tolist() != sorted(kp.keypoint.tolist())  # node order is shuffled
    pos = kp.graph.features
    assert torch.allclose(pos.mean(0), torch.zeros(2), atol=1e-5)
    assert float((pos ** 2).sum(1).mean()) == pytest.approx(1.0, rel=1e-5)


def test_knn_labels_improve_keypoint_matching():
    """The kNN step over 15 labelled instances beats pairwise matching of the same embeddings."""
    rng = np.random.default_rng(0)
    cfg = from_dict({"features": {"kind": "given"}, "embed": {"layers": 3},
                     "search": {"k": 10}, "supervised": {"k": 7}})
    net = RandomGMM(2, 64, 3)
    plain, labelled = [], []
    for _ in range(3):
        template = rng.uniform(0, 1, (10, 2))
        train = [keypoint_graph(template, rng, jitter=0.05) for _ in range(15)]
        coll = Collection.of([t.graph for t in train], [t.keypoint.astype(str).tolist()
                                                        for t in train],
                             [f"t{i}" for i in range(15)])
        o_c = torch.cat([net.embed(t.graph) for t in train])
        for _ in range(8):
            a, b = (keypoint_graph(template, rng, jitter=0.05, outliers=4) for _ in range(2))
            inl = np.flatnonzero(a.keypoint >= 0)
            node = {k: j for j, k in enumerate(b.keypoint)}
            pair = Pair(a.graph, b.graph, gold=(inl, np.array([node[a.keypoint[i]] for i in inl])))
            o_s, o_t = net.embed(a.graph), net.embed(b.graph)
            plain.append(match_vectors(pair, o_s, o_t, cfg).metrics["accuracy"])
            labelled.append(align_labelled(pair, coll, o_c, o_s, o_t, cfg).metrics["accuracy"])
    # measured 0.512 vs 0.338
    assert np.mean(labelled) > np.mean(plain) + 0.08, (np.mean(labelled), np.mean(plain))
