import itertools
from dataclasses import replace

import numpy as np
import pytest
import torch

from jobs.bench_ray import lists
from tfgm_dist.assign import (AUCTION_EPS, Bidders, Sellers, argmax, auction, auctioned, best_of,
                              decode, equal_rows, hungarian, listing_best, mutual, one_to_one,
                              score_span, sinkhorn_dense, sinkhorn_sparse, sparse_one_to_one,
                              spanning)
from tfgm_dist.config import AssignConfig
from tfgm_dist.pipeline import Scored
from tfgm_dist.search import Candidates

INF = float("inf")


def cands(scores, index) -> Candidates:
    return Candidates(torch.tensor(scores, dtype=torch.float32), torch.tensor(index))


def full_candidates(dense: torch.Tensor) -> Candidates:
    """Every target listed for every source, best first."""
    scores, index = dense.topk(dense.size(1), dim=1)
    return Candidates(scores, index)


def brute_force(scores: np.ndarray) -> float:
    n_s, n_t = scores.shape
    if n_s <= n_t:
        return max(scores[range(n_s), list(p)].sum()
                   for p in itertools.permutations(range(n_t), n_s))
    return max(scores[list(p), range(n_t)].sum() for p in itertools.permutations(range(n_s), n_t))


def assert_one_to_one(matched: torch.Tensor) -> None:
    used = matched[matched >= 0]
    assert used.unique().numel() == used.numel()


def test_argmax_takes_first_best_and_marks_empty_rows():
    c = cands([[0.9, 0.5], [0.7, 0.7], [-INF, -INF]], [[2, 0], [1, 0], [-1, -1]])
    # the tie in row 1 goes to the first listed (1), not to the smaller id (0)
    assert argmax(c).tolist() == [2, 1, -1]


def test_mutual_keeps_pairs_that_choose_each_other():
    forward = cands([[0.9, 0.1], [0.8, 0.2], [0.7, 0.6], [-INF, -INF]],
                    [[2, 0], [1, 0], [1, 2], [-1, -1]])
    reverse = cands([[0.5], [0.7], [0.9]], [[0], [2], [0]])
    # s0 -> t2 -> s0 yes; s1 -> t1 -> s2 no; s2 -> t1 -> s2 yes; s3 empty
    assert mutual(forward, reverse).tolist() == [2, -1, 1, -1]


def test_listing_best_is_each_targets_best_lister_and_parts_combine_to_the_whole():
    # rows 10, 11, 12; t0 listed by 10 (0.9) and 12 (0.9): the tie goes to the lower 10
    forward = cands([[0.9, 0.1], [0.8, 0.3], [0.9, 0.7], [-INF, -INF]],
                    [[0, 1], [1, 2], [0, 2], [-1, -1]])
    rows = torch.tensor([10, 11, 12, 13])
    targets, sources, scores = listing_best(forward, rows)
    assert targets.tolist() == [0, 1, 2] and sources.tolist() == [10, 11, 12]
    assert scores.tolist() == pytest.approx([0.9, 0.8, 0.7])
    c = lists(300, 80, 10, 3, seed=2)  # rounded scores: many ties
    whole = listing_best(c, torch.arange(300))
    # three parts, their rows in descending order: the same bests
    parts = [listing_best(c.take_rows(r), r) for r in torch.arange(300).flip(0).chunk(3)]
    combined = best_of(*(torch.cat(a) for a in zip(*parts)))
    assert all(torch.equal(a, b) for a, b in zip(whole, combined))


def test_mutual_rejects_mismatched_directions():
    with pytest.raises(ValueError, match="reverse has only 1 rows"):
        mutual(cands([[1.0]], [[3]]), cands([[1.0]], [[0]]))


@pytest.mark.parametrize("shape", [(5, 5), (3, 5), (5, 3)])
def test_hungarian_matches_brute_force(shape):
    scores = torch.from_numpy(np.random.default_rng(0).normal(size=shape))
    matched = hungarian(scores)
    assert matched.shape == (shape[0],)
    assert_one_to_one(matched)
    assert (matched >= 0).sum() == min(shape)
    rows = torch.nonzero(matched >= 0).squeeze(1)
    total = scores[rows, matched[rows]].sum().item()
    assert total == pytest.approx(brute_force(scores.numpy()))


def test_hungarian_refuses_large_dense_matrices():
    with pytest.raises(ValueError, match=r'method="sparse".*--assign one-to-one'):
        hungarian(torch.zeros(10, 10), max_bytes=799)
    assert hungarian(torch.zeros(10, 10), max_bytes=800).shape == (10,)


@pytest.mark.parametrize("shape", [(30, 30), (20, 30), (30, 20)])
def test_sparse_one_to_one_equals_hungarian_when_every_pair_is_a_candidate(shape):
    dense = torch.rand(shape, generator=torch.Generator().manual_seed(1))
    matched = sparse_one_to_one(full_candidates(dense), shape[1])
    assert torch.equal(matched, hungarian(dense))


def test_sparse_one_to_one_is_valid_and_maximal_when_full_matching_impossible():
    rng = np.random.default_rng(2)
    n_s, n_t, k = 50, 12, 3
    index = torch.from_numpy(np.stack([rng.choice(n_t, k, replace=False) for _ in range(n_s)]))
    c = Candidates.sorted(torch.rand(n_s, k, generator=torch.Generator().manual_seed(2)), index)
    matched = sparse_one_to_one(c, n_t)
    assert_one_to_one(matched)
    rows = torch.nonzero(matched >= 0).squeeze(1)
    assert (c.index[rows] == matched[rows, None]).any(dim=1).all()  # only candidate edges
    # Maximal: an unmatched source has no free candidate (except the single worst edge,
    # which costs exactly as much as staying unmatched).
    taken = set(matched[rows].tolist())
    worst = c.scores[c.index >= 0].min()
    for i in torch.nonzero(matched < 0).squeeze(1).tolist():
        free = [int(t) for t, s in zip(c.index[i], c.scores[i]) if t >= 0 and int(t) not in taken
                and s > worst]
        assert not free, f"source {i} left unmatched with free candidates {free}"


@pytest.mark.parametrize("seed", range(5))
def test_sparse_one_to_one_maximises_shifted_scores_like_brute_force(seed):
    rng = np.random.default_rng(seed)
    n_s, n_t, k = 6, 5, 2
    index = torch.from_numpy(np.stack([rng.choice(n_t, k, replace=False) for _ in range(n_s)]))
    c = Candidates.sorted(torch.from_numpy(rng.normal(size=(n_s, k)).astype(np.float32)), index)
    shifted = (c.scores - c.scores.min()).tolist()  # w up to the 1/span scale

    def total(choice):  # choice[i] = position in row i, or k for "unmatched"
        picked = [int(c.index[i, j]) for i, j in enumerate(choice) if j < k]
        if len(set(picked)) < len(picked):
            return -1.0
        return sum(shifted[i][j] for i, j in enumerate(choice) if j < k)

    best = max(total(choice) for choice in itertools.product(range(k + 1), repeat=n_s))
    matched = sparse_one_to_one(c, n_t)
    assert_one_to_one(matched)
    got = sum(shifted[i][j] for i in range(n_s) for j in range(k)
              if int(c.index[i, j]) == int(matched[i]))
    assert got == pytest.approx(best, abs=1e-5)


def test_equal_rows_groups_the_sources_that_share_a_list():
    target = np.array([[1, 2], [3, 4], [1, 2], [1, 2], [3, 4], [2, 1]])
    value = np.array([[0.5, 0.2], [0.5, 0.2], [0.5, 0.2], [0.5, 0.2], [0.5, 0.2], [0.5, 0.2]])
    value[3, 1] = 0.3  # same targets, another score: not the same list
    group = equal_rows(target, value)
    assert group[0] == group[2] >= 0 and group[1] == group[4] >= 0 and group[0] != group[1]
    assert group[3] == group[5] == -1


def test_sources_sharing_a_list_are_seated_together_in_few_rounds(monkeypatch):
    """100 lists of 10 targets, each given to 1-24 sources (as the leaves of one hub in a
    featureless social network): the sources of a list bid for its best targets at once.
    The optimum (scipy's dense solver, staying unmatched at value 0) within the auction's
    bound, in 2 rounds, where bidding one at a time takes over 10,000 (every excess source
    raising a price by eps a round). In three parts, each part's sharers a group, the
    same optimum within the bound."""
    from scipy.optimize import linear_sum_assignment

    n_t = 20_000
    base = lists(100, n_t, 10, 0, seed=0)
    rows = torch.repeat_interleave(torch.arange(100), torch.from_numpy(
        np.random.default_rng(0).integers(1, 25, 100)))
    c = base.take_rows(rows[torch.randperm(rows.numel(), generator=torch.Generator()
                                           .manual_seed(0))])
    n = c.index.size(0)
    edge = (c.index >= 0) & (c.scores != -torch.inf)
    s = c.scores.double()
    w = ((s - s[edge].min()) / (s[edge].max() - s[edge].min())).numpy()
    value = np.full((n, n_t + n), -1e9)
    value[np.arange(n), n_t + np.arange(n)] = 0.0  # each source's own "unmatched"
    i, j = np.nonzero(edge.numpy())
    value[i, c.index.numpy()[i, j]] = w[i, j]
    best = value[linear_sum_assignment(value, maximize=True)].sum()

    def total(matched: torch.Tensor) -> float:
        m = matched.numpy()
        return value[np.flatnonzero(m >= 0), m[m >= 0]].sum()

    matched, rounds = auctioned(c, n_t)
    assert_one_to_one(matched)
    assert rounds <= 3 and total(matched) == pytest.approx(best, abs=n * AUCTION_EPS)
    # in three parts (as on Ray without the handover) each part's sharers bid as a group:
    # the groups of the parts vie for the same targets, one price step a round (9,859 rounds)
    parted, _ = in_parts(c, n_t)
    assert_one_to_one(parted)
    assert total(parted) == pytest.approx(best, abs=n * AUCTION_EPS)
    monkeypatch.setattr("tfgm_dist.assign.equal_rows", lambda t, v: np.full(len(t), -1))
    alone, rounds = auctioned(c, n_t)
    assert rounds > 10_000 and total(alone) == pytest.approx(best, abs=n * AUCTION_EPS)


def test_sparse_one_to_one_keeps_a_strong_edge_over_two_weak_ones():
    # a={x: 10, y: 1}, b={x: 1}: {a-x} scores 10, {a-y, b-x} only 2 — b stays unmatched
    # rather than displace a from its clear best (staying unmatched costs the worst edge)
    c = cands([[10.0, 1.0], [1.0, -INF]], [[0, 1], [0, -1]])
    assert sparse_one_to_one(c, 2).tolist() == [0, -1]


def test_sparse_one_to_one_ignores_minus_inf_entries_and_empty_rows():
    c = cands([[0.5, -INF], [-INF, -INF]], [[0, 1], [-1, -1]])
    assert sparse_one_to_one(c, 2).tolist() == [0, -1]


def test_sparse_one_to_one_maps_back_to_target_numbers():
    # only targets 3 and 7 of 10 are listed; s1 wants 7 most, so s0 settles for 3
    c = cands([[0.9, 0.8], [1.0, -INF]], [[7, 3], [7, -1]])
    assert sparse_one_to_one(c, 10).tolist() == [3, 7]


def test_sparse_one_to_one_rejects_bad_candidates():
    with pytest.raises(ValueError, match="same target twice"):
        sparse_one_to_one(cands([[0.5, 0.4]], [[1, 1]]), 2)
    with pytest.raises(ValueError, match=r"lie in \[0, 2\)"):
        sparse_one_to_one(cands([[0.5]], [[2]]), 2)


@pytest.mark.parametrize("solver", ["sparse", "hungarian"])
def test_a_refined_pair_is_matched_on_its_decoding_scores_and_scored_by_probability(solver):
    """On the probabilities alone the matching is (t0, t1): 0.6 + 0.5 against 0.4 + 0.5;
    with the scores u = o_s . o_t weighing 1 it is (t1, t0): 1.4 + 1.5 against 0.6 + 0.5;
    the matches keep their probabilities as scores."""
    probs = Candidates(torch.tensor([[0.6, 0.4], [0.5, 0.5]]), torch.tensor([[0, 1], [0, 1]]))
    o_s, o_t = torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.eye(2)
    scored = Scored(probs, None, torch.arange(2), np.arange(2), 2, o_s, o_t, refined=True)
    off = AssignConfig(method="one-to-one", one_to_one=solver, score_weight=0.0)
    assert decode(scored, off)[0].tolist() == [0, 1]
    matched, score = decode(scored, replace(off, score_weight=1.0))
    assert matched.tolist() == [1, 0]
    torch.testing.assert_close(score, torch.tensor([0.4, 0.5]))


@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4)])
def test_sinkhorn_dense_rows_sum_to_one(shape):
    p = sinkhorn_dense(torch.randn(shape, generator=torch.Generator().manual_seed(3)),
                       tau=0.5, iters=200)
    assert torch.allclose(p.sum(dim=1), torch.ones(shape[0]), atol=1e-5)
    if shape[0] <= shape[1]:
        assert (p.sum(dim=0) <= 1 + 1e-3).all()


def test_sinkhorn_dense_is_doubly_stochastic_when_square():
    p = sinkhorn_dense(torch.randn(5, 5, generator=torch.Generator().manual_seed(4)),
                       tau=1.0, iters=500)
    assert torch.allclose(p.sum(dim=0), torch.ones(5), atol=1e-4)


@pytest.mark.parametrize("shape", [(6, 6), (4, 7), (7, 4)])
def test_sinkhorn_sparse_equals_dense_when_every_target_is_listed(shape):
    dense = torch.randn(shape, generator=torch.Generator().manual_seed(5))
    out = sinkhorn_sparse(full_candidates(dense), shape[1], tau=0.3, iters=20)
    expected = sinkhorn_dense(dense, tau=0.3, iters=20).gather(1, out.index)
    assert torch.allclose(out.scores.exp(), expected, atol=1e-5)
    assert (out.scores[:, :-1] >= out.scores[:, 1:]).all()


def test_sinkhorn_sparse_keeps_padding_and_normalises_rows():
    c = cands([[2.0, 1.0, -INF], [-INF, -INF, -INF], [0.5, 0.2, 0.1]],
              [[0, 2, -1], [-1, -1, -1], [1, 0, 2]])
    out = sinkhorn_sparse(c, 3, tau=0.5, iters=10)
    assert out.index[0, 2] == -1 and out.scores[0, 2] == -INF
    assert (out.index[1] == -1).all() and (out.scores[1] == -INF).all()
    assert torch.allclose(out.scores[[0, 2]].exp().sum(dim=1), torch.ones(2), atol=1e-5)


def test_one_to_one_dispatches_methods():
    dense = torch.rand(8, 8, generator=torch.Generator().manual_seed(6))
    c = full_candidates(dense)
    expected = hungarian(dense)
    assert torch.equal(one_to_one(c, 8, dense_scores=dense), expected)
    assert torch.equal(one_to_one(c, 8, dense_scores=dense, method="hungarian"), expected)
    assert torch.equal(one_to_one(c, 8), expected)
    sinkhorn = one_to_one(c, 8, method="sinkhorn")
    assert_one_to_one(sinkhorn)
    assert (sinkhorn >= 0).all()


def test_one_to_one_rejects_bad_arguments():
    c = cands([[1.0]], [[0]])
    with pytest.raises(ValueError, match="choose one of.*sinkhorn"):
        one_to_one(c, 1, method="greedy")
    with pytest.raises(ValueError, match="needs dense_scores"):
        one_to_one(c, 1, method="hungarian")
    with pytest.raises(ValueError, match=r"expected \(1, 1\)"):
        one_to_one(c, 1, dense_scores=torch.zeros(2, 1))


@pytest.mark.parametrize("n,m,seed", [(200, 20, 2), (400, 40, 3)])
def test_faq_on_sparse_matrices_is_scipys_faq(n, m, seed):
    """A noisy permuted copy, a tenth of it as seeds, a start as the polish makes one."""
    from scipy.optimize import quadratic_assignment

    from tfgm_dist.assign import _adjacency, faq
    rng = np.random.default_rng(seed)
    e, perm = rng.integers(0, n, (2, 4 * n)), rng.permutation(n)
    a, b = _adjacency(e, n), _adjacency(perm[e[:, rng.random(e.shape[1]) > 0.2]], n)
    seeds, k = np.stack([np.arange(m), perm[:m]], 1), n - m
    p0 = np.full((k, k), 0.1 / k)
    p0[np.arange(k), rng.permutation(k)] += 0.9
    want = quadratic_assignment(a.toarray(), b.toarray(), method="faq", options={
        "P0": p0, "partial_match": seeds, "maximize": True, "maxiter": 10}).col_ind
    np.testing.assert_array_equal(faq(a, b, p0, seeds, 10), want)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_opt_leaves_no_swap_that_keeps_more_edges_and_keeps_the_fixed_rows(seed):
    """Checked against every swap counted by brute force, from a random matching of a
    noisy permuted copy."""
    from tfgm_dist.assign import _adjacency, two_opt
    rng = np.random.default_rng(seed)
    n = 16
    e, perm = rng.integers(0, n, (2, 3 * n)), rng.permutation(n)
    a, b = _adjacency(e, n), _adjacency(perm[e[:, rng.random(e.shape[1]) > 0.2]], n)
    dense_a, dense_b = a.toarray(), b.toarray()

    def kept(m):
        return (dense_a * dense_b[np.ix_(m, m)]).sum() / 2

    start, fixed = rng.permutation(n), np.array([2, 5])
    out = two_opt(a, b, start, fixed)
    assert sorted(out) == list(range(n)) and (out[fixed] == start[fixed]).all()
    assert kept(out) >= kept(start)
    for i in range(n):
        for j in range(i + 1, n):
            if i in fixed or j in fixed:
                continue
            swapped = out.copy()
            swapped[[i, j]] = swapped[[j, i]]
            assert kept(swapped) <= kept(out), (i, j)


def test_polish_recovers_a_permuted_graph_from_a_start_with_swaps_and_keeps_the_seeds():
    import pyarrow as pa

    from tfgm_dist.assign import polish
    from tfgm_dist.graph import Graph
    rng = np.random.default_rng(0)
    n = 40
    upper = np.triu(rng.random((n, n)) < 0.15, 1)
    u, v = np.nonzero(upper)
    truth = rng.permutation(n)  # source i is target truth[i]
    source = Graph(ids=pa.array(np.arange(n)), edge_index=torch.tensor(np.stack([u, v])))
    # the target has two isolated nodes more: the source is padded to match
    target = Graph(ids=pa.array(np.arange(n + 2)),
                   edge_index=torch.tensor(np.stack([truth[u], truth[v]])))
    start = truth.copy()
    for a, b in [(3, 17), (8, 25), (30, 31)]:  # three swapped pairs: six rows wrong
        start[a], start[b] = start[b], start[a]
    seeds = (np.array([0, 1]), truth[[0, 1]])
    rows = torch.arange(2, n)
    moved = polish(torch.from_numpy(start[2:]), rows, source, target, fixed=seeds)
    assert torch.equal(moved, torch.from_numpy(truth[2:]))
    # a wrong pair that is fixed stays as given: the seeds are not moved
    wrong = (np.array([3]), np.array([start[3]]))
    rows = torch.tensor([i for i in range(n) if i != 3])
    moved = polish(torch.from_numpy(start[rows.numpy()]), rows, source, target, fixed=wrong)
    assert not np.isin(start[3], moved.numpy())


def test_edges_kept_counts_the_source_edges_a_matching_maps_onto_target_edges():
    import pyarrow as pa

    from tfgm_dist.assign import edges_kept
    from tfgm_dist.graph import Graph
    # a path 0-1-2-3 (one edge given twice, both ways, and a self-loop: counted once, never)
    source = Graph(ids=pa.array(np.arange(4)),
                   edge_index=torch.tensor([[0, 1, 2, 2, 1, 3], [1, 2, 3, 1, 0, 3]]))
    target = Graph(ids=pa.array(np.arange(5)), edge_index=torch.tensor([[4, 3, 2], [3, 2, 1]]))
    rows = torch.arange(4)
    assert edges_kept(torch.tensor([4, 3, 2, 1]), rows, source, target) == 3  # all of them
    assert edges_kept(torch.tensor([4, 3, 1, 2]), rows, source, target) == 2  # 1-2 kept
    assert edges_kept(torch.tensor([4, 3, -1, 1]), rows, source, target) == 1  # 2 unmatched
    assert edges_kept(torch.tensor([4, 3]), torch.tensor([0, 1]), source, target) == 1


def test_polish_beyond_faqs_size_swaps_pairs_alone_back_into_place():
    import pyarrow as pa

    from tfgm_dist.assign import POLISH_MAX_NODES, polish
    from tfgm_dist.graph import Graph
    rng = np.random.default_rng(1)
    n = POLISH_MAX_NODES + 100
    u, v = rng.integers(0, n, (2, 5 * n))
    truth = rng.permutation(n)
    source = Graph(ids=pa.array(np.arange(n)), edge_index=torch.tensor(np.stack([u, v])))
    target = Graph(ids=pa.array(np.arange(n)),
                   edge_index=torch.tensor(np.stack([truth[u], truth[v]])))
    start = truth.copy()
    wrong = rng.choice(n, 40, replace=False).reshape(20, 2)  # 20 swapped pairs
    start[wrong[:, 0]], start[wrong[:, 1]] = truth[wrong[:, 1]], truth[wrong[:, 0]]
    rows = torch.arange(n)
    moved = polish(torch.from_numpy(start), rows, source, target)
    assert torch.equal(moved, torch.from_numpy(truth))


def in_parts(c: Candidates, n_t: int, parts: int = 3) -> tuple[torch.Tensor, int]:
    """What the Ray run does (tfgm_dist.distributed.one_to_one), in process: sources and
    targets dealt to ``parts`` parts at random, each part bidding for its sources and selling
    its targets, stopped after 50 rounds and resumed. The matching and the rounds."""
    n_s, P = c.index.size(0), parts
    g = torch.Generator().manual_seed(7)
    source_part = torch.randint(P, (n_s,), generator=g)
    home = torch.randint(P, (n_t,), generator=g).numpy()
    rows = [torch.nonzero(source_part == q).flatten() for q in range(P)]
    listed = [c.take_rows(r) for r in rows]
    span = spanning([score_span(x) for x in listed])
    bidders = [Bidders(x, r, n_t, span, home, P) for x, r in zip(listed, rows)]
    sellers = [Sellers(np.flatnonzero(home == p)) for p in range(P)]
    outcome: list[list] = [[] for _ in range(P)]
    bids: list = []

    def bid(eps: float) -> int:
        out = [b.bid(eps, *o) for b, o in zip(bidders, outcome)]
        bids[:] = [b for _, b in out]
        return sum(free for free, _ in out)

    def resolve() -> None:
        res = [s.resolve(*[bids[q][p] for q in range(P)]) for p, s in enumerate(sellers)]
        outcome[:] = [[res[p][q] for p in range(P)] for q in range(P)]

    rounds, eps, finished = auction(bid, resolve, AUCTION_EPS, n_s, stop=50)
    if not finished:
        assert rounds == 50
        rounds, _, finished = auction(bid, resolve, eps, n_s, rounds=rounds)
    assert finished
    matched = torch.full((n_s,), -2)
    for r, b in zip(rows, bidders):
        matched[r] = b.matched()
    return matched, rounds


@pytest.mark.parametrize("n_s, levels", [(300, 0), (500, 3)])  # 200 and 121 rounds
def test_the_auction_split_into_parts_equals_one_part(n_s, levels):
    """The auction in three parts (:func:`in_parts`) gives one part's matching."""
    n_t = n_s + 20
    c = lists(n_s, n_t, 10, levels, seed=levels + 1)  # seed 3 of (500, 3): 4,749 rounds
    matched, rounds = in_parts(c, n_t)
    one = sparse_one_to_one(c, n_t)
    assert torch.equal(matched, one)
    assert (one >= 0).sum() > n_s // 2 and rounds > 100
