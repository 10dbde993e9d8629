"""Stage 5, refine: training-free consensus on sparse candidates, and the two-way merge."""
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from tfgm_dist.config import EmbedConfig
from tfgm_dist.distributed.consensus import Consensus, merged, transposed_entries
from tfgm_dist.embed import RowBlock, embed, graph_operator, whole
from tfgm_dist.features import degree_sinusoidal, degrees
from tfgm_dist.graph import Graph
from tfgm_dist.refine import decoding, indicator_rows, list_width, merge, refine
from tfgm_dist.search import Candidates, top_k

INF = float("inf")
PSI = EmbedConfig(layers=1)
LAYERS = 3
SCALE = LAYERS + 1  # unit blocks of the TFGM embedding


@dataclass
class Pair:
    block_s: RowBlock
    block_t: RowBlock
    forward: Candidates  # source -> target top-10
    backward: Candidates  # target -> source top-10
    truth: torch.Tensor  # truth[i] = target number of source i


@pytest.fixture(scope="module")
def pair() -> Pair:
    """A 200-node random graph (mean degree ~6) and a randomly renumbered copy of it,
    degree-sinusoidal features, 3 weight-free layers, flat top-10 both ways."""
    n = 200
    gen = torch.Generator().manual_seed(0)
    ei = torch.randint(0, n, (2, 600), generator=gen)
    g_s = Graph(pa.array(np.arange(n)), ei[:, ei[0] != ei[1]])
    perm = torch.randperm(n, generator=gen)
    g_t = g_s.permuted(perm)  # target node i is source node perm[i]
    truth = torch.empty_like(perm)
    truth[perm] = torch.arange(n)
    cfg = EmbedConfig(layers=LAYERS)
    blocks = [whole(graph_operator(g.edge_index, n)) for g in (g_s, g_t)]
    o_s, o_t = (embed(degree_sinusoidal(degrees(g), 64), b, cfg)
                for g, b in zip((g_s, g_t), blocks))
    fwd = top_k(o_s.numpy(), o_t.numpy(), 10)[0]
    bwd = top_k(o_t.numpy(), o_s.numpy(), 10)[0]
    return Pair(blocks[0], blocks[1], fwd, bwd, truth)


def run(c: Candidates, pair: Pair, seed: int = 0, steps: int = 10, dim: int = 128,
        backward: bool = False, **kwargs) -> Candidates:
    bs, bt = (pair.block_t, pair.block_s) if backward else (pair.block_s, pair.block_t)
    return refine(c, bs, bt, steps=steps, dim=dim, psi=PSI, scale=SCALE, seed=seed, **kwargs)


def accuracy(c: Candidates, truth: torch.Tensor) -> float:
    return (c.index[:, 0] == truth).float().mean().item()


def test_same_seed_gives_identical_output(pair):
    a, b = run(pair.forward, pair, seed=3), run(pair.forward, pair, seed=3)
    assert torch.equal(a.index, b.index)
    assert torch.equal(a.scores, b.scores)


def test_different_seeds_give_different_scores(pair):
    a, b = run(pair.forward, pair, seed=3), run(pair.forward, pair, seed=4)
    assert not torch.allclose(a.scores, b.scores)


def test_rows_are_probability_distributions_over_their_candidates(pair):
    c = pair.forward
    index, scores = c.index.clone(), c.scores.clone()
    index[5], scores[5] = -1, -INF  # an empty row
    index[6, 4:], scores[6, 4:] = -1, -INF  # a row with 4 candidates
    out = run(Candidates(scores, index), pair)
    valid = out.index >= 0
    sums = out.scores.masked_fill(~valid, 0.0).sum(1)
    nonempty = torch.ones(200, dtype=torch.bool)
    nonempty[5] = False
    torch.testing.assert_close(sums[nonempty], torch.ones(199))
    assert (out.scores[valid] >= 0).all() and (out.scores[valid] <= 1).all()
    assert (out.index[5] == -1).all()
    assert valid[6].sum() == 4
    # each row keeps exactly its candidate set, re-sorted by probability
    for i in (0, 6, 42):
        assert set(out.index[i][valid[i]].tolist()) == set(index[i][index[i] >= 0].tolist())
        s = out.scores[i][valid[i]]
        assert (s[:-1] >= s[1:]).all()


def test_padding_of_refined_rows_is_minus_one_with_minus_inf(pair):
    c = pair.forward
    index, scores = c.index.clone(), c.scores.clone()
    index[7, 3:], scores[7, 3:] = -1, -INF
    out = run(Candidates(scores, index), pair)
    assert (out.index[7, 3:] == -1).all() and (out.scores[7, 3:] == -INF).all()


def test_lists_wider_than_the_target_graph_are_refined_like_their_real_entries():
    """k = 50 candidate slots on 16-node graphs: the padding beyond the 16 targets changes
    nothing (it once made the SDDMM pattern larger than the dense matrix)."""
    n = 16
    ei = torch.randint(0, n, (2, 40), generator=torch.Generator().manual_seed(1))
    block = whole(graph_operator(ei[:, ei[0] != ei[1]], n))
    o = embed(torch.randn(n, 8, generator=torch.Generator().manual_seed(2)), block,
              EmbedConfig(layers=2))
    wide, exact = top_k(o.numpy(), o.numpy(), 50)[0], top_k(o.numpy(), o.numpy(), n)[0]
    assert (wide.index[:, n:] == -1).all()
    out = refine(wide, block, block, steps=3, dim=16, psi=PSI, scale=3, seed=0)
    ref = refine(exact, block, block, steps=3, dim=16, psi=PSI, scale=3, seed=0)
    assert out.k == 50 and (out.index[:, n:] == -1).all() and (out.scores[:, n:] == -INF).all()
    assert torch.equal(out.index[:, :n], ref.index)
    torch.testing.assert_close(out.scores[:, :n], ref.scores)


def test_fixed_pairs_are_pinned_to_their_target_with_probability_one(pair):
    sources = torch.tensor([3, 50, 199])
    targets = torch.tensor([0, 123, 7])  # arbitrary, need not be among the candidates
    out = run(pair.forward, pair, fixed=(sources, targets))
    assert out.index[sources, 0].tolist() == targets.tolist()
    assert out.scores[sources, 0].tolist() == [1.0, 1.0, 1.0]
    assert (out.index[sources, 1:] == -1).all()
    free = run(pair.forward, pair)  # the other rows are still distributions
    assert not torch.equal(out.index[sources], free.index[sources])


def test_refinement_does_not_lower_argmax_accuracy_on_a_permuted_copy(pair):
    before = accuracy(pair.forward, pair.truth)
    fwd = run(pair.forward, pair, dim=256)
    bwd = run(pair.backward, pair, dim=256, backward=True)
    assert accuracy(fwd, pair.truth) >= before
    assert accuracy(merge(fwd, bwd, 10), pair.truth) >= before


def test_refinement_repairs_perturbed_initial_scores(pair):
    """Consensus must carry real structure: with the initial scores blurred by noise
    (argmax mostly wrong), refinement recovers the permutation from the neighbourhoods."""
    gen = torch.Generator().manual_seed(1)
    noisy = Candidates.sorted(pair.forward.scores
                              + 0.03 * torch.randn(pair.forward.scores.shape, generator=gen),
                              pair.forward.index)
    before = accuracy(noisy, pair.truth)
    after = accuracy(run(noisy, pair, dim=256), pair.truth)
    assert before < 0.5
    assert after >= 0.9, (before, after)


def test_refine_rejects_candidates_of_the_wrong_height(pair):
    with pytest.raises(ValueError, match="rows"):
        run(pair.forward.take_rows(torch.arange(10)), pair)


def test_merge_sums_both_directions_on_hand_example():
    fwd = Candidates(torch.tensor([[0.6, 0.4], [1.0, -INF]]), torch.tensor([[0, 1], [1, -1]]))
    # backward rows are targets 0, 1, 2 listing sources
    bwd = Candidates(torch.tensor([[0.5, 0.5], [1.0, -INF], [1.0, -INF]]),
                     torch.tensor([[0, 1], [1, -1], [0, -1]]))
    m = merge(fwd, bwd, 3)
    # source 0: t0 = .6 + .5, t2 = 1.0 (backward only), t1 = .4 (forward only)
    # source 1: t1 = 1.0 + 1.0, t0 = .5 (backward only)
    assert m.index.tolist() == [[0, 2, 1], [1, 0, -1]]
    torch.testing.assert_close(m.scores, torch.tensor([[1.1, 1.0, 0.4], [2.0, 0.5, -INF]]))


def test_decoding_adds_the_weighted_score_on_hand_example():
    """Each listed entry gets ``p + w * o_s[i] . o_t[j]``, rows re-sorted, padding kept; with
    ``rows_t`` the same from an ``o_t`` of the listed targets alone."""
    probs = Candidates(torch.tensor([[0.5, 0.5], [0.7, -INF]]), torch.tensor([[1, 0], [2, -1]]))
    o_s = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    o_t = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    d = decoding(probs, o_s, o_t, 0.5)
    # source 0: t0 = .5 + .5 * 1, t1 = .5 + .5 * .6; source 1: t2 = .7 + .5 * 1
    assert d.index.tolist() == [[0, 1], [2, -1]]
    torch.testing.assert_close(d.scores, torch.tensor([[1.0, 0.8], [1.2, -INF]]))
    served = o_t[[2, 0, 1]]  # the listed targets' rows, in another order
    local = Candidates(probs.scores, probs.index)
    d2 = decoding(local, o_s, served, 0.5, rows_t=torch.tensor([[2, 1], [0, -1]]))
    assert d2.index.tolist() == d.index.tolist()
    torch.testing.assert_close(d2.scores, d.scores)
    assert decoding(probs, o_s, o_t, 0.0).index.tolist() == [[0, 1], [2, -1]]  # ties: by target
    # lists padded wider than the target graph: the padding is not scored
    wide = Candidates(F.pad(probs.scores, (0, 3), value=-INF), F.pad(probs.index, (0, 3), value=-1))
    d3 = decoding(wide, o_s, o_t, 0.5)
    assert d3.index.tolist() == [[0, 1, -1, -1, -1], [2, -1, -1, -1, -1]]
    torch.testing.assert_close(d3.scores[:, :2], d.scores)


def test_merge_of_refined_directions_holds_entries_of_both(pair):
    fwd = run(pair.forward, pair)
    bwd = run(pair.backward, pair, backward=True)
    m = merge(fwd, bwd, 200)  # wide enough to keep the whole union
    got = {(i, j): s for i, (row, sc) in enumerate(zip(m.index.tolist(), m.scores.tolist()))
           for j, s in zip(row, sc) if j >= 0}
    expected: dict[tuple[int, int], float] = {}
    for i, (row, sc) in enumerate(zip(fwd.index.tolist(), fwd.scores.tolist())):
        for j, s in zip(row, sc):
            if j >= 0:
                expected[i, j] = expected.get((i, j), 0.0) + s
    only_backward = 0
    for j, (row, sc) in enumerate(zip(bwd.index.tolist(), bwd.scores.tolist())):
        for i, s in zip(row, sc):
            if i >= 0:
                only_backward += (i, j) not in expected
                expected[i, j] = expected.get((i, j), 0.0) + s
    assert only_backward > 0  # the example exercises backward-only entries
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-5)
    narrow = merge(fwd, bwd, 10)
    assert narrow.k == 10
    assert torch.equal(narrow.index, m.index[:, :10])


def test_indicator_rows_are_those_of_one_draw():
    """A part keeps its rows of the step's indicators: the same numbers as one process's
    ``torch.randn(n, dim)``, step after step, whatever the chunking."""
    nodes = np.array([0, 5, 16383, 16384, 40000, 40001])
    one, part = torch.Generator().manual_seed(4), torch.Generator().manual_seed(4)
    for _ in range(2):
        full = torch.randn(40002, 3, generator=one)
        assert torch.equal(indicator_rows(part, 40002, 3, nodes), full[nodes])


def split(pair: Pair, c: Candidates, backward: bool, fixed, P: int = 3, steps: int = 5,
          dim: int = 32) -> Candidates:
    """:func:`refine` as a Ray run does it, in process: the source and target rows dealt
    to ``P`` parts at random, each part a :class:`Consensus` that exchanges only its
    contributions and served rows; the propagation (tested equal on parts elsewhere) by
    ``embed`` on whole graphs, sliced."""
    bs, bt = (pair.block_t, pair.block_s) if backward else (pair.block_s, pair.block_t)
    n_s, n_t = bs.nodes.numel(), bt.nodes.numel()
    g = np.random.default_rng(1)
    part_s, part_t = g.integers(0, P, n_s), g.integers(0, P, n_t)
    position_t = np.zeros(n_t, dtype=np.int64)
    nodes_s = [np.flatnonzero(part_s == p) for p in range(P)]
    nodes_t = [np.flatnonzero(part_t == p) for p in range(P)]
    for t in nodes_t:
        position_t[t] = np.arange(t.size)
    width = list_width(c)
    parts = []
    for p in range(P):
        mine = np.isin(fixed[0].numpy(), nodes_s[p])
        pinned = (torch.from_numpy(np.searchsorted(nodes_s[p], fixed[0].numpy()[mine])),
                  fixed[1][torch.from_numpy(mine)])
        parts.append(Consensus(c.take_rows(torch.from_numpy(nodes_s[p])), nodes_s[p], part_t,
                               position_t, P, width, n_s, steps=steps, scale=SCALE,
                               fixed=pinned, dim=dim, seed=0))
    for q in range(P):
        parts[q].receive([x.patterns()[q] for x in parts], [x.needs()[q] for x in parts],
                         nodes_t[q].size)
    for _ in range(steps):
        r_s = torch.empty(n_s, dim)
        for p, x in enumerate(parts):
            r_s[nodes_s[p]] = x.draw()
        sent = [x.contributions() for x in parts]
        r_t = torch.empty(n_t, dim)
        for q, x in enumerate(parts):
            r_t[nodes_t[q]] = x.transposed(*[s[q] for s in sent])
        o_s, o_t = embed(r_s, bs, PSI), embed(r_t, bt, PSI)
        served = [x.serve(o_t[nodes_t[q]].numpy()) for q, x in enumerate(parts)]
        for p, x in enumerate(parts):
            x.update(o_s[nodes_s[p]].numpy(), *[s[p] for s in served])
    out = Candidates(torch.empty(n_s, c.k), torch.empty(n_s, c.k, dtype=torch.long))
    for p, x in enumerate(parts):
        got = x.result()
        out.scores[nodes_s[p]], out.index[nodes_s[p]] = got.scores, got.index
    return out


@pytest.mark.parametrize("backward", [False, True])
def test_refinement_split_into_parts_equals_one_process(pair, backward):
    """Each part sums its targets' rows of S^T r_s from the others' contributions, in one
    process's order: the refined lists are one process's, float for float, pinned seeds
    included."""
    c = pair.backward if backward else pair.forward
    fixed = (torch.tensor([3, 50, 77]), pair.truth[[3, 50, 77]])
    if backward:
        fixed = (fixed[1], fixed[0])
    one = run(c, pair, steps=5, dim=32, fixed=fixed, backward=backward)
    got = split(pair, c, backward, fixed)
    assert torch.equal(got.index, one.index) and torch.equal(got.scores, one.scores)


def test_the_merge_split_into_parts_equals_merge(pair):
    """The merge of both directions done per part, from what each part receives of the
    other direction (transposed_entries), is :func:`merge`'s, float for float."""
    P, n = 3, pair.forward.index.size(0)
    part = np.random.default_rng(2).integers(0, P, n)
    nodes = [np.flatnonzero(part == p) for p in range(P)]
    one = merge(pair.forward, pair.backward, 10)
    sent = [transposed_entries(pair.backward.take_rows(torch.from_numpy(t)), t, part, P)
            for t in nodes]
    for p in range(P):
        got = merged(pair.forward.take_rows(torch.from_numpy(nodes[p])), nodes[p],
                     *[s[p] for s in sent])
        want = one.take_rows(torch.from_numpy(nodes[p]))
        assert torch.equal(got.index, want.index) and torch.equal(got.scores, want.scores)
