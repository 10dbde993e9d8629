"""Stage 3, embed: graph operators, layers over row blocks, and the TFGM concatenation."""
import math

import numpy as np
import pytest
import torch

from tfgm_dist.config import EmbedConfig
from tfgm_dist.embed import (LayerParams, embed, graph_operator, layer, layer_params, propagate,
                             row_block, weighted_degrees, whole)

# The path 0 - 1 - 2 - 3, each edge given once (the operator symmetrises it).
PATH = torch.tensor([[0, 1, 2], [1, 2, 3]])
S6, S2 = 1 / math.sqrt(6), 1 / math.sqrt(2)
T = 1 / 3

# Hand-written operators of the path; row i holds the weights node i aggregates.
EXPECTED = {
    ("sum", True): [[1, 1, 0, 0],
                    [1, 1, 1, 0],
                    [0, 1, 1, 1],
                    [0, 0, 1, 1]],
    ("sum", False): [[0, 1, 0, 0],
                     [1, 0, 1, 0],
                     [0, 1, 0, 1],
                     [0, 0, 1, 0]],
    # D~^-1 (A + I): degrees with self-loops are 2, 3, 3, 2
    ("mean", True): [[.5, .5, 0, 0],
                     [T, T, T, 0],
                     [0, T, T, T],
                     [0, 0, .5, .5]],
    # D^-1 A: degrees 1, 2, 2, 1
    ("mean", False): [[0, 1, 0, 0],
                      [.5, 0, .5, 0],
                      [0, .5, 0, .5],
                      [0, 0, 1, 0]],
    # D~^-1/2 (A + I) D~^-1/2: entry ij = 1 / sqrt(d_i d_j), d = 2, 3, 3, 2
    ("gcn", True): [[.5, S6, 0, 0],
                    [S6, T, T, 0],
                    [0, T, T, S6],
                    [0, 0, S6, .5]],
    # D^-1/2 A D^-1/2, d = 1, 2, 2, 1
    ("gcn", False): [[0, S2, 0, 0],
                     [S2, 0, .5, 0],
                     [0, .5, 0, S2],
                     [0, 0, S2, 0]],
}


def dense_operator(op_kind: str, self_loops: bool, edge_index: torch.Tensor, n: int) -> np.ndarray:
    """The operator as a dense matrix, from numpy only (independent of PyG)."""
    a = np.zeros((n, n))
    for u, v in edge_index.T.tolist():
        if u != v:
            a[u, v] = a[v, u] = 1.0
    if self_loops:
        a += np.eye(n)
    d = a.sum(1)
    if op_kind == "mean":
        return a / np.maximum(d, 1)[:, None]
    if op_kind == "gcn":
        inv = np.where(d > 0, d ** -0.5, 0.0)
        return inv[:, None] * a * inv[None, :]
    return a


def apply(op, x: torch.Tensor) -> torch.Tensor:
    """The operator applied to ``x`` through the whole-graph block (reading its halo rows)."""
    block = whole(op)
    return propagate(block, x[block.halo])


def random_graph(n: int, m: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    ei = torch.randint(0, n, (2, m), generator=gen)
    return ei[:, ei[0] != ei[1]]


def random_partition(n: int, parts: int, seed: int) -> list[torch.Tensor]:
    """``parts`` non-empty sorted blocks covering 0..n-1, assigned at random."""
    gen = torch.Generator().manual_seed(seed)
    owner = torch.randint(0, parts, (n,), generator=gen)
    owner[torch.randperm(n, generator=gen)[:parts]] = torch.arange(parts)  # none empty
    return [torch.nonzero(owner == p).squeeze(1) for p in range(parts)]


@pytest.mark.parametrize("kind,self_loops", sorted(EXPECTED))
def test_operator_matches_hand_computed_path_matrix(kind, self_loops):
    """propagate(whole(op), I) is the operator; compared with the hand-written 4-node path."""
    op = graph_operator(PATH, 4, kind, self_loops=self_loops)
    got = apply(op, torch.eye(4))
    torch.testing.assert_close(got, torch.tensor(EXPECTED[kind, self_loops], dtype=torch.float),
                               atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind,self_loops", sorted(EXPECTED))
def test_operator_applied_to_features_is_matrix_product(kind, self_loops):
    x = torch.tensor([[1.0, -2.0], [0.5, 3.0], [-1.0, 0.0], [2.0, 1.0]])
    got = apply(graph_operator(PATH, 4, kind, self_loops=self_loops), x)
    expected = torch.tensor(EXPECTED[kind, self_loops], dtype=torch.float) @ x
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=0)


def test_directed_operator_aggregates_from_edge_sources():
    """With directed=True an edge (j, i) lets i read j only: row i of the operator holds j."""
    op = graph_operator(PATH, 4, "sum", self_loops=False, directed=True)
    expected = torch.tensor([[0., 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]])
    assert whole(op).halo.tolist() == [0, 1, 2]  # node 3 is nobody's in-neighbour
    torch.testing.assert_close(apply(op, torch.eye(4)), expected)


def test_duplicate_and_reversed_edges_count_once_in_undirected_operator():
    edges = torch.tensor([[0, 1, 0, 1, 2, 3], [1, 0, 1, 2, 3, 2]])
    op = graph_operator(edges, 4, "sum", self_loops=True)
    torch.testing.assert_close(apply(op, torch.eye(4)),
                               torch.tensor(EXPECTED["sum", True], dtype=torch.float))


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
@pytest.mark.parametrize("self_loops", [True, False])
def test_operator_equals_pygs_utilities(kind, self_loops):
    """The operator is what PyG's to_undirected (max), add_remaining_self_loops, coalesce and
    gcn_norm make of a weighted edge list with repeated edges and some self-loops given."""
    from torch_geometric.nn.conv.gcn_conv import gcn_norm
    from torch_geometric.utils import add_remaining_self_loops, coalesce, degree, to_undirected
    gen = torch.Generator().manual_seed(3)
    n = 30
    edges = torch.randint(0, n, (2, 120), generator=gen)
    edges[:, :5] = torch.arange(5).repeat(2, 1)  # self-loops on nodes 0-4
    weight = torch.rand(120, generator=gen) + 0.5
    ei, w = to_undirected(edges, weight, n, reduce="max")
    if kind == "gcn":
        ei, w = gcn_norm(ei, w, n, add_self_loops=self_loops)
    else:
        if self_loops:
            ei, w = add_remaining_self_loops(ei, w, 1.0, n)
        ei, w = coalesce(ei, w, n)
        if kind == "mean":
            w = w / degree(ei[1], n, dtype=w.dtype).clamp(min=1)[ei[1]]
    expected = torch.sparse_coo_tensor(ei.flip(0), w, (n, n)).to_dense()
    op = graph_operator(edges, n, kind, self_loops=self_loops, edge_weight=weight)
    torch.testing.assert_close(apply(op, torch.eye(n)), expected)


def test_unknown_operator_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown operator"):
        graph_operator(PATH, 4, "max")


def test_propagate_rejects_wrong_halo_rows():
    with pytest.raises(ValueError, match="halo"):
        propagate(whole(graph_operator(PATH, 4)), torch.ones(3, 2))


@pytest.mark.parametrize("kind", ["sum", "mean", "gcn"])
def test_inner_product_of_concatenation_is_sum_of_per_layer_cosines(kind):
    """<O_s[i], O_t[j]> = sum_l cos(F_l^s[i], F_l^t[j]), with F_l computed densely by hand."""
    d, layers = 5, 3
    graphs = [(7, random_graph(7, 12, seed=1)), (6, random_graph(6, 9, seed=2))]
    gen = torch.Generator().manual_seed(3)
    xs = [torch.randn(n, d, generator=gen) for n, _ in graphs]
    cfg = EmbedConfig(layers=layers, operator=kind)
    outs = [embed(x, whole(graph_operator(ei, n, kind)), cfg) for x, (n, ei) in zip(xs, graphs)]
    assert all(o.shape == (x.size(0), (layers + 1) * d) for o, x in zip(outs, xs))

    per_layer = []  # per graph: list of layer outputs F_0 .. F_L (dense numpy, by hand)
    for x, (n, ei) in zip(xs, graphs):
        a = dense_operator(kind, True, ei, n)
        f = x.double().numpy()
        f = f / np.linalg.norm(f, axis=1, keepdims=True)
        fs = [f]
        for _ in range(layers):
            f = a @ f
            f = f / np.linalg.norm(f, axis=1, keepdims=True)
            fs.append(f)
        per_layer.append(fs)
    expected = np.zeros((graphs[0][0], graphs[1][0]))
    for i in range(graphs[0][0]):
        for j in range(graphs[1][0]):
            for fs, ft in zip(*per_layer):
                u, v = fs[i], ft[j]
                expected[i, j] += float(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v))
    got = (outs[0] @ outs[1].T).double().numpy()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert np.all(got <= layers + 1 + 1e-5)  # at most num_blocks


@pytest.mark.parametrize("parts", [1, 2, 3])
@pytest.mark.parametrize("kind,self_loops,relu,random_weights,bias",
                         [("sum", True, False, False, 0.0), ("mean", False, False, False, 0.0),
                          ("gcn", True, True, True, 0.5)])
def test_layers_over_a_node_partition_equal_whole_graph_layers(parts, kind, self_loops, relu,
                                                               random_weights, bias):
    """Concatenating layer() over the blocks of a random partition (each reading only its halo
    rows) gives the whole-graph layer to 1e-6, for every layer."""
    n, d = 60, 8
    ei = random_graph(n, 150, seed=parts)
    op = graph_operator(ei, n, kind, self_loops=self_loops)
    cfg = EmbedConfig(layers=3, operator=kind, self_loops=self_loops, relu=relu,
                      random_weights=random_weights, bias=bias)
    params = layer_params(cfg, d, seed=5)
    h = torch.nn.functional.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(0)),
                                      dim=-1)
    full_block = whole(op)
    for p in params:
        full = layer(full_block, h[full_block.halo], p, relu)
        pieced = torch.empty_like(full)
        for nodes in random_partition(n, parts, seed=10 * parts):
            block = row_block(op, nodes)
            pieced[nodes] = layer(block, h[block.halo], p, relu)
        torch.testing.assert_close(pieced, full, atol=1e-6, rtol=0)
        h = full


@pytest.mark.parametrize("kind,self_loops", [("sum", True), ("mean", True), ("gcn", True),
                                             ("sum", False)])
def test_an_operator_of_some_rows_holds_exactly_the_whole_operators_entries_of_them(
        kind, self_loops):
    """``rows`` keeps a node set's rows of the operator, entry for entry as the whole
    graph's, from the edges that touch them alone (a part's, with every node's degree)."""
    n = 50
    ei = random_graph(n, 140, seed=7)
    ei = torch.cat([ei, torch.tensor([[3, 8], [3, 8]])], dim=1)  # given self-loops stay
    w = torch.rand(ei.size(1), generator=torch.Generator().manual_seed(1)) + 0.5
    whole_op = graph_operator(ei, n, kind, self_loops=self_loops, edge_weight=w)
    summed = graph_operator(ei, n, "sum", self_loops=self_loops, edge_weight=w)
    degrees = weighted_degrees(summed.edge_index[1], summed.edge_weight, n)  # gcn's
    nodes = torch.tensor([0, 3, 4, 9, 20, 33, 49])
    touch = torch.isin(ei, nodes).any(0)
    part = graph_operator(ei[:, touch], n, kind, self_loops=self_loops, edge_weight=w[touch],
                          degrees=degrees if kind == "gcn" else None, rows=nodes)
    assert torch.isin(part.edge_index[1], nodes).all()
    want = row_block(whole_op, nodes)
    got = row_block(part, nodes)
    torch.testing.assert_close(got.halo, want.halo)
    torch.testing.assert_close(got.adj.to_dense(), want.adj.to_dense(), atol=0, rtol=0)


def test_row_block_halo_is_the_in_neighbourhood_of_its_rows():
    n = 30
    ei = random_graph(n, 40, seed=4)
    op = graph_operator(ei, n, "sum", self_loops=False)
    a = dense_operator("sum", False, ei, n)
    nodes = torch.tensor([2, 5, 11, 17, 29])
    block = row_block(op, nodes)
    expected_halo = np.flatnonzero(a[nodes.numpy()].any(axis=0))
    assert block.halo.tolist() == expected_halo.tolist()
    assert tuple(block.adj.shape) == (5, len(expected_halo))
    torch.testing.assert_close(block.adj.to_dense(),
                               torch.tensor(a[np.ix_(nodes.numpy(), expected_halo)],
                                            dtype=torch.float))


def test_a_pairs_embedding_is_each_channels_embedding_scaled_and_side_by_side():
    """pipeline.embeddings writes every block in place: bit for bit the channels' embed()
    times the square root of their weights, concatenated (with an input block, one that
    weighs two layers, without one, and BasicTFGM's single block); the largest score is the
    weighted count of unit blocks."""
    from tfgm_dist.features import Channel
    from tfgm_dist.pipeline import embeddings, scale
    n, gen = 40, torch.Generator().manual_seed(2)
    ops = tuple(graph_operator(random_graph(n, 90, seed=s), n, "sum") for s in (1, 2))
    specs = [(EmbedConfig(layers=2), 1.0, 8), (EmbedConfig(layers=2, input_weight=2.0), 0.5, 7),
             (EmbedConfig(layers=3, include_input=False), 0.25, 5),
             (EmbedConfig(layers=2, basic=True), 3.0, 6)]
    chans = [Channel(f"c{i}", torch.randn(n, d, generator=gen), torch.randn(n, d, generator=gen),
                     spec, w) for i, (spec, w, d) in enumerate(specs)]
    got = embeddings(chans, ops, seed=4)
    for g, op in enumerate(ops):
        want = torch.cat([b * math.sqrt(c.weight * w) for c in chans for b, w in zip(
            embed((c.x_s, c.x_t)[g], whole(op), c.embed,
                  layer_params(c.embed, c.x_s.size(1), 4)).split(c.x_s.size(1), 1),
            c.embed.block_weights)], 1)
        assert torch.equal(got[g], want)
    assert [c.embed.block_weights for c in chans] == [[1, 1, 1], [2, 1, 1], [1, 1, 1], [1]]
    assert scale(chans) == 1.0 * 3 + 0.5 * 4 + 0.25 * 3 + 3.0 * 1
    own = (got[0] * got[0]).sum(1)  # a row against itself scores the largest score
    torch.testing.assert_close(own, torch.full((n,), scale(chans)))


def test_basic_tfgm_returns_one_unit_block_with_residual():
    """BasicTFGM: [N, d] unit rows; for one layer, norm(norm(A x^) + x^) with x^ = norm(x)."""
    n, d = 4, 3
    x = torch.tensor([[1.0, 0, 0], [0, 2, 0], [0, 0, 3], [1, 1, 1]])
    cfg = EmbedConfig(layers=1, basic=True)
    assert cfg.num_blocks == 1
    out = embed(x, whole(graph_operator(PATH, n)), cfg)
    assert out.shape == (n, d)
    torch.testing.assert_close(out.norm(dim=1), torch.ones(n))
    xh = torch.nn.functional.normalize(x, dim=-1)
    f1 = torch.nn.functional.normalize(torch.tensor(EXPECTED["sum", True]).float() @ xh, dim=-1)
    torch.testing.assert_close(out, torch.nn.functional.normalize(f1 + xh, dim=-1))

    deep = embed(x, whole(graph_operator(PATH, n)), EmbedConfig(layers=3, basic=True))
    assert deep.shape == (n, d)
    torch.testing.assert_close(deep.norm(dim=1), torch.ones(n))


def test_every_block_of_the_default_embedding_is_unit_norm():
    n, d = 20, 6
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(1))
    cfg = EmbedConfig(layers=3)
    out = embed(x, whole(graph_operator(random_graph(n, 40, 1), n)), cfg)
    assert cfg.num_blocks == 4 and out.shape == (n, 4 * d)
    torch.testing.assert_close(out.view(n, 4, d).norm(dim=-1), torch.ones(n, 4))


def test_random_weights_and_bias_are_deterministic_per_seed_and_differ_across_seeds():
    cfg = EmbedConfig(layers=2, random_weights=True, bias=0.7)
    a, b, c = layer_params(cfg, 16, seed=1), layer_params(cfg, 16, seed=1), layer_params(cfg, 16, 2)
    assert len(a) == 2
    for pa_, pb, pc in zip(a, b, c):
        assert pa_.weight.shape == (16, 16) and pa_.bias.shape == (16,)
        assert torch.equal(pa_.weight, pb.weight) and torch.equal(pa_.bias, pb.bias)
        assert not torch.allclose(pa_.weight, pc.weight)
        assert not torch.allclose(pa_.bias, pc.bias)
    assert not torch.allclose(a[0].weight, a[1].weight)  # layers draw independently


def test_random_weight_and_bias_scales():
    """W ~ N(0, 1/d) and b ~ N(0, beta^2/d): empirical std within 10% for d = 1024."""
    d, beta = 1024, 2.0
    (p,) = layer_params(EmbedConfig(layers=1, random_weights=True, bias=beta), d, seed=0)
    assert abs(p.weight.std().item() * math.sqrt(d) - 1) < 0.1
    assert abs(p.bias.std().item() * math.sqrt(d) / beta - 1) < 0.1


def test_weight_free_default_has_no_random_parts():
    params = layer_params(EmbedConfig(layers=3), 8, seed=0)
    assert params == [LayerParams(None, None)] * 3


def test_random_parts_change_the_embedding_and_seed_matters():
    n, d = 12, 6
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(0))
    block = whole(graph_operator(random_graph(n, 20, 0), n))
    free = embed(x, block, EmbedConfig(layers=2))
    cfg = EmbedConfig(layers=2, random_weights=True, bias=1.0)
    r1 = embed(x, block, cfg, layer_params(cfg, d, 1))
    r1b = embed(x, block, cfg, layer_params(cfg, d, 1))
    r2 = embed(x, block, cfg, layer_params(cfg, d, 2))
    assert torch.equal(r1, r1b)
    assert not torch.allclose(r1, r2)
    assert not torch.allclose(r1[:, d:], free[:, d:])
    torch.testing.assert_close(r1[:, :d], free[:, :d])  # F0 is the input either way


def test_include_input_false_drops_the_input_block():
    n, d = 10, 4
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(2))
    block = whole(graph_operator(random_graph(n, 15, 2), n))
    with_x = embed(x, block, EmbedConfig(layers=2))
    without = embed(x, block, EmbedConfig(layers=2, include_input=False))
    assert EmbedConfig(layers=2, include_input=False).num_blocks == 2
    assert without.shape == (n, 2 * d)
    torch.testing.assert_close(without, with_x[:, d:])


def test_embed_rejects_feature_rows_not_matching_nodes():
    with pytest.raises(ValueError, match="rows"):
        embed(torch.ones(3, 2), whole(graph_operator(PATH, 4)), EmbedConfig())


@pytest.mark.parametrize("kwargs,message", [
    ({"layers": -1}, "layers"),
    ({"bias": -0.1}, "bias"),
    ({"operator": "max"}, "operator"),
    ({"basic": True, "include_input": False}, "include_input"),
])
def test_embed_config_rejects_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EmbedConfig(**kwargs)


def test_embed_config_rejects_nan_bias():
    with pytest.raises(ValueError, match="bias"):
        EmbedConfig(bias=float("nan"))


def test_a_row_block_pickles_without_the_csr_warning_and_computes_the_same():
    """Ray ships blocks to its workers: unpickled in a fresh process (torch warns once per
    process) a block warns nothing, and multiplies the same (a CSR tensor unpickled as such
    warned "beta state" in every worker's log)."""
    import pickle
    import subprocess
    import sys
    op = graph_operator(torch.randint(0, 100, (2, 500), generator=torch.Generator().manual_seed(0)),
                        100)
    block = row_block(op, torch.arange(0, 100, 3))
    h = torch.randn(block.halo.numel(), 8)
    worker = ("import pickle, sys; block, h = pickle.loads(sys.stdin.buffer.read()); "
              "sys.stdout.buffer.write(pickle.dumps(block.adj @ h))")
    done = subprocess.run([sys.executable, "-W", "error:Sparse CSR tensor support", "-c", worker],
                          input=pickle.dumps((block, h)), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()[-300:]
    assert torch.equal(pickle.loads(done.stdout), block.adj @ h)
