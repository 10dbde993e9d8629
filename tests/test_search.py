"""Stage 4, search: FAISS top-k against brute force, candidate restriction, padding, COO top-k."""
import faiss
import numpy as np
import pytest
import torch

from tfgm_dist.search import (REFINE_FACTOR, Candidates, Reranked, both_ways, build_index,
                              candidates_from_coo, distinct_rows, exact_best, pq_codes, probe,
                              probe_rows, search, set_nprobe, top_k, trained_index,
                              trained_on, training_rows, tune_nprobe)

NEEDS_CUDA = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU; torch sees none on this host")

INF = float("inf")


def random_points(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_force(x_s: np.ndarray, x_t: np.ndarray, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    scores, index = torch.topk(torch.from_numpy(x_s) @ torch.from_numpy(x_t).T, k, dim=1)
    return scores, index


def test_flat_top_k_equals_brute_force_topk():
    x_s, x_t = random_points(120, 16, 0), random_points(300, 16, 1)
    c = top_k(x_s, x_t, 10, kind="flat")[0]
    scores, index = brute_force(x_s, x_t, 10)
    assert c.index.dtype == torch.int64 and c.scores.dtype == torch.float32
    assert torch.equal(c.index, index)
    torch.testing.assert_close(c.scores, scores, atol=1e-5, rtol=0)
    assert c.k == 10


def test_search_streams_blocks_without_changing_the_result():
    x_s, x_t = random_points(50, 8, 2), random_points(80, 8, 3)
    index = build_index(x_t, "flat")
    one = search(index, x_s, 5)
    blocked = search(index, x_s, 5, block=7)
    assert torch.equal(one.index, blocked.index) and torch.equal(one.scores, blocked.scores)


def test_distinct_rows_finds_the_rows_equal_in_every_part_bit_for_bit():
    a = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 2.0], [-0.0, 1.0], [1.0, 2.0]], np.float32)
    b = np.array([[7], [8], [7], [8], [9]])
    first, inverse = distinct_rows(a, b, block=2)  # hashed two rows at a time
    assert np.array_equal(a[first][inverse], a) and np.array_equal(b[first][inverse], b)
    assert inverse[0] == inverse[2] and len(set(inverse.tolist())) == 4  # -0.0 is not 0.0
    first, inverse = distinct_rows(a[:0], b[:0])  # an empty part's rows
    assert first.size == inverse.size == 0


def test_equal_queries_are_searched_once_and_get_equal_lists(monkeypatch):
    """Featureless nodes often have equal vectors: each distinct query is searched once
    (FAISS sees 30 of 90 rows) and the lists are those of the queries searched one by one."""
    x_t = random_points(200, 8, 4)
    x_s = np.repeat(random_points(30, 8, 5), 3, axis=0)
    index = build_index(x_t, "flat")
    seen = []
    real = type(index).search

    def counted(self, x, *args, **kwargs):
        seen.append(len(x))
        return real(self, x, *args, **kwargs)

    monkeypatch.setattr(type(index), "search", counted)
    got = search(index, x_s, 5)
    assert seen[0] == 30 and sum(seen) <= 60
    monkeypatch.undo()
    for i in range(0, 90, 7):
        alone = search(index, x_s[i:i + 1], 5)
        assert torch.equal(got.index[i:i + 1], alone.index)
        assert torch.equal(got.scores[i:i + 1], alone.scores)


def test_a_sharded_flat_index_merged_equals_one_index_bit_for_bit():
    """Wide rows and many exact ties (duplicated rows), as featureless graphs give: BLAS rounds
    a pair differently in products of other shapes, so the shards must not decide by it."""
    rng = np.random.default_rng(5)
    x_t = np.repeat(rng.standard_normal((150, 2048)).astype(np.float32), 4, axis=0)
    x_s = x_t[rng.choice(600, 200)] + 0.01 * rng.standard_normal((200, 2048)).astype(np.float32)
    one = search(build_index(x_t, "flat"), x_s, 10)
    shard = rng.permutation(600) % 3
    lists = [search(build_index(x_t[ids], "flat"), x_s, 10, ids=ids)
             for ids in (np.flatnonzero(shard == p) for p in range(3))]
    merged = Candidates.sorted(torch.cat([c.scores for c in lists], 1),
                               torch.cat([c.index for c in lists], 1))
    assert torch.equal(merged.index[:, :10], one.index)
    assert torch.equal(merged.scores[:, :10], one.scores)


@pytest.mark.parametrize("n_s, n_t, k, block_cells", [
    (200, 600, 10, 600 * 37),  # several row blocks, merged down the columns
    (400, 300, 10, 300 * 5),  # blocks of 5 rows: columns' entries buffered over blocks
    (200, 600, 10, 1 << 25),  # one block
    (5, 7, 10, 1 << 25),  # k beyond both sides: padded lists, nothing to tie-check
    (40, 12, 10, 12 * 3),  # blocks thinner than k + 1
])
@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)])
def test_both_ways_equals_two_flat_searches_bit_for_bit(n_s, n_t, k, block_cells, bf16, device):
    """Exact ties (duplicated rows) and zero rows, as featureless graphs give, must come out as
    two FAISS searches put them: the same lists and the same last bits; also from a
    bfloat16 product, whose candidates are certified by its error bound, and from products
    on a GPU, which sum in their own order; forward only where no backward is asked."""
    rng = np.random.default_rng(n_s + n_t)
    x_t = np.repeat(rng.standard_normal((-(-n_t // 4), 512)).astype(np.float32), 4, axis=0)[:n_t]
    x_s = x_t[rng.choice(n_t, n_s)] + 0.01 * rng.standard_normal((n_s, 512)).astype(np.float32)
    x_s[::9], x_t[::11] = 0.0, 0.0
    ids_s, ids_t = np.arange(n_s) * 3 + 1, np.arange(n_t) * 2 + 5
    forward, backward = both_ways(x_s, x_t, k, ids_s=ids_s, ids_t=ids_t, block_cells=block_cells,
                                  bf16=bf16, device=device)
    want_f = search(build_index(x_t, "flat"), x_s, k, ids=ids_t)
    want_b = search(build_index(x_s, "flat"), x_t, k, ids=ids_s)
    only, none = both_ways(x_s, x_t, k, ids_s=None, ids_t=ids_t, block_cells=block_cells,
                           bf16=bf16, device=device)
    assert none is None
    for got, want in ((forward, want_f), (backward, want_b), (only, want_f)):
        assert torch.equal(got.index, want.index) and torch.equal(got.scores, want.scores)


def test_both_ways_from_bfloat16_searches_again_where_scores_lie_within_its_error():
    """Targets closer than bfloat16 can tell apart (one row plus noise of 1e-4): no row's
    list is certified by the product, and each is the flat search's."""
    rng = np.random.default_rng(3)
    x_t = rng.standard_normal(256).astype(np.float32) + 1e-4 * rng.standard_normal(
        (300, 256)).astype(np.float32)
    x_s = x_t[rng.choice(300, 80)] + 1e-4 * rng.standard_normal((80, 256)).astype(np.float32)
    ids_s, ids_t = np.arange(80), np.arange(300)
    forward, backward = both_ways(x_s, x_t, 10, ids_s=ids_s, ids_t=ids_t, bf16=True)
    for got, want in ((forward, search(build_index(x_t, "flat"), x_s, 10)),
                      (backward, search(build_index(x_s, "flat"), x_t, 10))):
        assert torch.equal(got.index, want.index) and torch.equal(got.scores, want.scores)


def test_the_bfloat16_product_is_chosen_only_where_it_certifies_the_lists():
    """Random unit rows of a wide space crowd their scores within bfloat16's error (lists
    float32 certifies would be searched again): float32. Rows of a few directions, whose
    scores spread as embeddings' do: bfloat16."""
    from tfgm_dist.search import bf16_certifies
    rng = np.random.default_rng(2)

    def unit(x: np.ndarray) -> np.ndarray:
        return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)

    wide = unit(rng.standard_normal((10000, 1536)))  # 2,000 leave k + 51 room enough
    assert not bf16_certifies(unit(rng.standard_normal((1000, 1536))), wide, 50)
    few = rng.standard_normal((8, 1536))
    assert bf16_certifies(unit(rng.standard_normal((1000, 8)) @ few),
                          unit(rng.standard_normal((2000, 8)) @ few), 50)


def test_one_sort_by_group_then_descending_value_keeps_two_stable_sorts_order():
    """The column merge's single int64 key orders as a stable sort by value (descending)
    then by group did: ties, -0.0 beside 0.0, -inf and negative values included."""
    from tfgm_dist.search import _by_group_then_descending
    g = torch.Generator().manual_seed(1)
    values = (torch.randn(5000, generator=g) * 4).round() / 4  # many ties
    values[::7], values[::11], values[::13] = -0.0, 0.0, -torch.inf
    groups = torch.randint(0, 40, (5000,), generator=g)
    order = torch.sort(_by_group_then_descending(groups, values), stable=True).indices
    two = torch.argsort(values, descending=True, stable=True)
    two = two[torch.argsort(groups[two], stable=True)]
    assert torch.equal(order, two)


def test_candidates_restrict_the_search_and_map_ids_back():
    x_s, x_t = random_points(60, 16, 4), random_points(200, 16, 5)
    cand = np.sort(np.random.default_rng(6).choice(200, size=40, replace=False))
    c = top_k(x_s, x_t, 5, candidates=cand)[0]
    sub_scores, sub_index = brute_force(x_s, x_t[cand], 5)
    assert torch.equal(c.index, torch.from_numpy(cand)[sub_index])
    torch.testing.assert_close(c.scores, sub_scores, atol=1e-5, rtol=0)
    assert np.isin(c.index.numpy(), cand).all()


def test_unsorted_candidates_map_back_to_target_numbers():
    x_s, x_t = random_points(10, 8, 7), random_points(30, 8, 8)
    cand = np.array([17, 3, 29, 8])
    c = top_k(x_s, x_t, 4, candidates=cand)[0]
    dense = x_s @ x_t.T
    for i in range(10):
        expected = cand[np.argsort(-dense[i, cand], kind="stable")]
        assert c.index[i].tolist() == expected.tolist()


def test_rows_with_fewer_than_k_targets_are_padded():
    x_s, x_t = random_points(4, 8, 9), random_points(3, 8, 10)
    c = top_k(x_s, x_t, 5)[0]
    assert c.index.shape == (4, 5)
    assert (c.index[:, 3:] == -1).all() and (c.scores[:, 3:] == -INF).all()
    assert sorted(c.index[0, :3].tolist()) == [0, 1, 2]
    assert torch.isfinite(c.scores[:, :3]).all()

    r = top_k(x_s, random_points(50, 8, 11), 4, candidates=np.array([7, 42]))[0]
    assert (r.index[:, 2:] == -1).all() and (r.scores[:, 2:] == -INF).all()
    assert set(r.index[:, :2].flatten().tolist()) == {7, 42}


@pytest.mark.parametrize("kind,options", [("ivf", {"nprobe": 96}), ("ivfpq", {"nprobe": 40}),
                                          ("hnsw", {"ef_search": 256})])
def test_approximate_indexes_reach_recall_at_10(kind, options):
    x_t = random_points(2000, 32, 12)
    x_s = random_points(200, 32, 13)
    exact = top_k(x_s, x_t, 10, kind="flat")[0]
    approx = top_k(x_s, x_t, 10, kind=kind, seed=0, **options)[0]
    hits = sum(len(set(a) & set(e)) for a, e in zip(approx.index.tolist(), exact.index.tolist()))
    recall = hits / exact.index.numel()
    assert recall >= 0.9, f"{kind} recall@10 = {recall:.3f}"
    assert (approx.index >= 0).all()


@pytest.mark.parametrize("kind", ["ivf", "ivfpq"])
def test_shards_copying_one_trained_index_find_what_one_index_finds(kind):
    """Shards that each add their rows to a copy of one index trained on the whole base's
    sample probe the same lists: merged, IVF's lists are one index's; IVF-PQ's best are at
    least as good (each shard re-ranks its own best codes). Shards trained apart scan other
    lists, and tie this test's queries to no single index."""
    x_s, x_t = noisy_pair(3000, 32, 0.8, 30)
    n, k = x_t.shape[0], 10
    one = search(build_index(x_t, kind, nprobe=4), x_s, k)
    trained = trained_index(x_t[training_rows(n, kind, None, 0)], n, kind, None)
    ids = np.array_split(np.random.default_rng(1).permutation(n), 3)
    lists = [search(build_index(x_t[i], kind, nprobe=4, trained=trained), x_s, k, ids=i)
             for i in ids]
    merged = Candidates.sorted(torch.cat([c.scores for c in lists], 1),
                               torch.cat([c.index for c in lists], 1))
    if kind == "ivf":
        assert torch.equal(merged.index[:, :k], one.index)
        assert torch.equal(merged.scores[:, :k], one.scores)
    else:
        assert (merged.scores[:, :k] >= one.scores).all()
        assert (merged.index[:, 0] == one.index[:, 0]).float().mean() > 0.95
    apart = [search(build_index(x_t[i], kind, nprobe=4), x_s, k, ids=i) for i in ids]
    assert not all(torch.equal(a.index, b.index) for a, b in zip(apart, lists))


def noisy_pair(n: int, d: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Targets, and sources that are their noisy copies (source i belongs to target i)."""
    x_t = random_points(n, d, seed)
    x_s = x_t + noise * random_points(n, d, seed + 1)
    return (x_s / np.linalg.norm(x_s, axis=1, keepdims=True)).astype(np.float32), x_t


def test_ivfpq_scores_are_exact_inner_products():
    x_s, x_t = noisy_pair(3000, 48, 0.8, 20)
    c = top_k(x_s, x_t, 5, kind="ivfpq", nprobe=8)[0]
    exact = torch.from_numpy(x_s) @ torch.from_numpy(x_t).T
    valid = c.index >= 0
    rows = torch.arange(c.index.size(0))[:, None].expand_as(c.index)
    torch.testing.assert_close(c.scores[valid], exact[rows[valid], c.index[valid]],
                               atol=1e-5, rtol=0)


def test_ivfpq_reranks_as_faiss_refine_flat_does_against_the_rows_it_was_given():
    x_s, x_t = noisy_pair(3000, 48, 0.8, 23)
    trained = trained_on(x_t, "ivfpq", None, 0)
    ours = build_index(x_t, "ivfpq", nprobe=6, trained=trained)
    assert isinstance(ours, Reranked) and ours.x is x_t  # the rows themselves, no copy
    theirs = faiss.IndexRefineFlat(faiss.clone_index(trained))
    theirs.k_factor = REFINE_FACTOR
    theirs.add(x_t)
    set_nprobe(theirs, 6)
    got, want = ours.search(x_s, 7), theirs.search(x_s, 7)
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
    same = (got[1] == want[1]).mean()
    assert same > 0.999, same  # beyond that, ties between equal exact scores
    with pytest.raises(ValueError, match="contiguous float32"):
        Reranked(faiss.clone_index(trained), x_t[:, :40])


def test_tuning_raises_nprobe_until_the_sampled_recall_is_met():
    x_s, x_t = noisy_pair(4000, 32, 0.9, 21)
    index = build_index(x_t, "ivfpq", nprobe=1)
    probes = x_s[probe_rows(4000, size=500)]
    exact = exact_best(x_t, probes)
    report = tune_nprobe(lambda n: (probe(index, probes, 10, n)[0], exact, 63), 1, 0.95)
    assert report["nprobe"] > 1 and report["nlist"] == 63 == int(np.sqrt(4000))
    assert report["recall@1"] >= 0.95 and report["sample"] == 500
    # the report holds for the tuned index beyond its sample: measured on every query
    got, _ = index.search(x_s, 10)
    assert np.mean(got[:, 0] >= exact_best(x_t, x_s) - 1e-5) >= 0.93


def test_tuning_raises_nprobe_by_root_two_and_stops_at_all_lists():
    seen = []

    def measure(nprobe):  # finds the exact best for nprobe of 10 queries
        seen.append(nprobe)
        return np.arange(10.0) < nprobe, np.ones(10), 12

    assert tune_nprobe(measure, 1, 0.5)["nprobe"] == 6 and seen == [1, 2, 3, 4, 6]
    seen.clear()
    report = tune_nprobe(measure, 8, 1.0)
    assert seen == [8, 11] and report == {"nprobe": 11, "nlist": 12, "recall@1": 1.0,
                                          "sample": 10}
    seen.clear()
    assert tune_nprobe(lambda n: (np.zeros(10), np.ones(10), 12), 8, 0.9)["nprobe"] == 12


def test_top_k_tunes_ivf_but_not_exact_indexes_and_reports_it():
    x_s, x_t = noisy_pair(2000, 32, 0.9, 22)
    _, tuned = top_k(x_s, x_t, 3, kind="ivf", nprobe=1, recall=0.9)
    assert tuned["recall@1"] >= 0.9 and tuned["nprobe"] > 1
    assert top_k(x_s, x_t, 3, kind="flat", recall=0.9)[1] == {}
    assert top_k(x_s, x_t, 3, kind="ivf", nprobe=1, recall=0.0)[1] == {}


@pytest.mark.parametrize("d,m", [(384, 48), (2048, 256), (128, 16), (36, 18), (6, 6), (17, 17)])
def test_pq_codes_have_at_most_eight_dimensions_and_16_codes_at_least(d, m):
    assert pq_codes(d) == m


def test_build_index_and_search_reject_bad_arguments():
    x = random_points(10, 4, 14)
    with pytest.raises(ValueError, match="unknown index kind"):
        build_index(x, "lsh")
    with pytest.raises(ValueError, match="k must be >= 1"):
        search(build_index(x), x, 0)


def test_candidates_from_coo_sums_duplicates_and_keeps_top_k_per_row():
    rows = torch.tensor([0, 0, 0, 1, 0, 2, 2, 2])
    cols = torch.tensor([2, 1, 2, 3, 3, 0, 1, 4])
    vals = torch.tensor([0.5, 0.4, 0.3, 1.0, 0.1, 0.2, 0.9, 0.6])
    c = candidates_from_coo(rows, cols, vals, num_rows=4, k=2)
    # row 0: col 2 -> 0.5 + 0.3 = 0.8, col 1 -> 0.4, col 3 -> 0.1 (dropped)
    # row 1: col 3 -> 1.0 then padding; row 2: 0.9 (col 1), 0.6 (col 4); row 3 empty
    assert c.index.tolist() == [[2, 1], [3, -1], [1, 4], [-1, -1]]
    torch.testing.assert_close(c.scores, torch.tensor([[0.8, 0.4], [1.0, -INF], [0.9, 0.6],
                                                       [-INF, -INF]]))


def test_candidates_from_coo_with_no_entries_is_all_padding():
    empty = torch.tensor([], dtype=torch.long)
    c = candidates_from_coo(empty, empty, torch.tensor([]), num_rows=2, k=3)
    assert (c.index == -1).all() and (c.scores == -INF).all() and c.index.shape == (2, 3)


def test_candidates_sorted_orders_descending_with_padding_last():
    scores = torch.tensor([[0.1, 0.9, 0.5, 0.5], [0.3, 0.2, 0.7, 0.1]])
    index = torch.tensor([[4, -1, 7, 2], [1, 2, -1, -1]])
    c = Candidates.sorted(scores, index)
    # row 0: the -1 entry (score 0.9) is padding; the tie 0.5/0.5 goes to the lower target
    assert c.index.tolist() == [[2, 7, 4, -1], [1, 2, -1, -1]]
    torch.testing.assert_close(c.scores, torch.tensor([[0.5, 0.5, 0.1, -INF],
                                                       [0.3, 0.2, -INF, -INF]]))


def test_scatter_rows_places_lists_and_leaves_other_rows_empty():
    c = Candidates(torch.tensor([[0.9, 0.1], [0.8, -INF]]), torch.tensor([[5, 6], [7, -1]]))
    s = c.scatter_rows(torch.tensor([3, 0]), num_rows=5)
    assert s.index.tolist() == [[7, -1], [-1, -1], [-1, -1], [5, 6], [-1, -1]]
    torch.testing.assert_close(s.scores, torch.tensor([[0.8, -INF], [-INF, -INF], [-INF, -INF],
                                                       [0.9, 0.1], [-INF, -INF]]))
    back = s.take_rows(torch.tensor([3, 0]))
    assert torch.equal(back.index, c.index) and torch.equal(back.scores, c.scores)


def test_candidates_reject_mismatched_shapes():
    with pytest.raises(ValueError, match="must be equal"):
        Candidates(torch.zeros(2, 3), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="must be equal"):
        Candidates(torch.zeros(3), torch.zeros(3, dtype=torch.long))


def test_torch_searches_on_the_device_only_a_flat_index_on_a_gpu_faiss_cannot_use():
    from tfgm_dist.search import gpu_available, on_device
    assert not on_device("flat", "cpu") and not on_device("ivfpq", "cuda")
    assert on_device("flat", "cuda") == (not gpu_available())
