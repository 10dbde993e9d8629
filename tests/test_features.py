"""Stage 2, features: shared n-gram, degree and projection spaces, seed ties, validation."""
import math
import zlib

import numpy as np
import pyarrow as pa
import pytest
import torch
import torch.nn.functional as F

from tfgm_dist.features import (Names, degree_onehot, degree_sinusoidal, degrees,
                                document_frequency, inverse_document_frequency, ngram_counts,
                                node_named, projected_side_by_side, random_projection,
                                sentence_vectors, tf_idf, tie_seeds, unit_rows, validate)
from tfgm_dist.errors import InputError
from tfgm_dist.graph import Graph


def graph(ids, edges=((), ())) -> Graph:
    return Graph(pa.array(ids), torch.tensor(edges, dtype=torch.long).view(2, -1),
                 source="g.tsv")


def cos(a: torch.Tensor, b: torch.Tensor) -> float:
    return F.cosine_similarity(a, b, dim=0).item()


def char_ngrams(names: list[list[str]], n: int = 2, dim: int = 2048) -> list[torch.Tensor]:
    """Each graph's n-gram TF-IDF, the IDF over both: what the names channel is made of."""
    counts = [ngram_counts(texts, n, dim) for texts in names]
    idf = inverse_document_frequency(sum(document_frequency(c) for c in counts),
                                     sum(c.size(0) for c in counts))
    return [tf_idf(c, idf) for c in counts]


def dense_ngrams(*args, **kwargs) -> list[torch.Tensor]:
    return [x.to_dense() for x in char_ngrams(*args, **kwargs)]


def test_char_ngrams_are_sparse_with_one_entry_per_distinct_gram():
    (x,) = char_ngrams([["abab", "b"]], n=2, dim=2048)
    assert x.is_sparse and x.shape == (2, 2048)
    # " a", "ab", "ba", "ab", "b " -> 4 distinct grams; " b", "b " -> 2
    assert torch.bincount(x.indices()[0]).tolist() == [4, 2]


def test_char_ngrams_is_deterministic_across_calls():
    names = [["Berlin", "Paris", "Ab"], ["paris", "Rome"]]
    a, b = dense_ngrams(names), dense_ngrams(names)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert a[0].shape == (3, 2048) and a[1].shape == (2, 2048)


def test_char_ngrams_hand_computed_buckets_and_idf():
    """"ab" -> grams " a", "ab", "b " in buckets crc32(gram) % dim, weighted by
    idf = log((1 + N) / (1 + df)) + 1 over the N = 3 names of both graphs."""
    dim = 2048
    x_s, x_t = dense_ngrams([["ab"], ["AB", "cd"]], n=2, dim=dim)
    b = {g: zlib.crc32(g.encode()) % dim for g in (" a", "ab", "b ", " c", "cd", "d ")}
    assert len(set(b.values())) == 6  # no collision in this example
    idf_shared = math.log(4 / 3) + 1  # df = 2 ("ab" and "AB")
    idf_single = math.log(4 / 2) + 1  # df = 1 ("cd")
    expected_s = torch.zeros(1, dim)
    expected_s[0, [b[" a"], b["ab"], b["b "]]] = idf_shared
    expected_t = torch.zeros(2, dim)
    expected_t[0, [b[" a"], b["ab"], b["b "]]] = idf_shared
    expected_t[1, [b[" c"], b["cd"], b["d "]]] = idf_single
    torch.testing.assert_close(x_s, expected_s)
    torch.testing.assert_close(x_t, expected_t)


def test_char_ngrams_counts_repeated_grams():
    (x,) = dense_ngrams([["aaa"]], n=2, dim=64)
    # " a", "aa", "aa", "a ": the "aa" bucket holds 2 x idf, idf = log(2/2) + 1 = 1
    assert x[0, zlib.crc32(b"aa") % 64].item() == pytest.approx(2.0)
    assert x.sum().item() == pytest.approx(4.0)


def test_char_ngrams_same_name_in_both_graphs_has_cosine_one():
    x_s, x_t = dense_ngrams([["Berlin", "Paris"], ["Rome", "PARIS", "berlin"]])
    assert cos(x_s[0], x_t[2]) == pytest.approx(1.0, abs=1e-6)
    assert cos(x_s[1], x_t[1]) == pytest.approx(1.0, abs=1e-6)


def test_char_ngrams_different_names_differ():
    x_s, x_t = dense_ngrams([["Berlin", "Paris"], ["Rome", "Parma"]])
    assert cos(x_s[0], x_t[0]) < 0.5
    assert cos(x_s[1], x_t[0]) < 0.5
    assert 0.0 < cos(x_s[1], x_t[1]) < 0.9  # shares " p", "pa", "ar"


@pytest.mark.parametrize("n", [1, 2, 3])
def test_char_ngrams_are_the_grams_of_each_character_window(n):
    """Against the definition, one window at a time: lower-cased, one space of padding each
    side, bucket crc32(gram) mod dim, IDF over both lists; names of other scripts, empty and
    short ones."""
    import zlib
    names = [["Ab", "", "x", "北京市", "Ünïcödé ß", "a  b"],
             ["AB", "Straße", "q", "🙂 ok"]]
    dim = 64
    got = dense_ngrams(names, n=n, dim=dim)
    df, counts = np.zeros(dim), []
    for texts in names:
        c = np.zeros((len(texts), dim))
        for i, text in enumerate(texts):
            text = f" {text.lower()} "
            for j in range(len(text) - n + 1):
                c[i, zlib.crc32(text[j:j + n].encode()) % dim] += 1
        counts.append(c)
        df += (c > 0).sum(0)
    idf = np.log((1 + 10) / (1 + df)) + 1
    for x, c in zip(got, counts):
        np.testing.assert_allclose(x.numpy(), c * idf, rtol=1e-6)


def test_char_ngrams_rejects_bad_sizes():
    with pytest.raises(ValueError):
        char_ngrams([["a"]], n=0)
    with pytest.raises(ValueError):
        char_ngrams([["a"]], dim=0)


def test_degrees_count_each_neighbour_once_and_skip_self_loops():
    # 0-1 given twice and reversed, 1-2, a self-loop on 2; node 3 isolated
    g = graph([10, 11, 12, 13], [[0, 1, 1, 1, 2], [1, 0, 0, 2, 2]])
    assert degrees(g).tolist() == [1.0, 2.0, 1.0, 0.0]


def test_degree_sinusoidal_matches_formula_at_entries():
    dim = 8
    deg = torch.tensor([0.0, 3.0, 7.0])
    x = degree_sinusoidal(deg, dim)
    assert x.shape == (3, dim)
    for r, dv in enumerate(deg.tolist()):
        for i in range(dim // 2):
            angle = dv / 10000 ** (2 * i / dim)
            assert x[r, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert x[r, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    # degree 0 -> sin 0 = 0, cos 0 = 1
    assert x[0].tolist() == [0.0, 1.0] * 4


def test_degree_sinusoidal_rejects_odd_width():
    with pytest.raises(ValueError, match="even"):
        degree_sinusoidal(torch.tensor([1.0]), 7)


def test_degree_onehot_shares_the_vocabulary_of_both_graphs():
    degs = [torch.tensor([1.0, 3.0]), torch.tensor([2.0, 3.0, 5.0])]
    vocab = torch.unique(torch.cat(degs))
    x_s, x_t = (degree_onehot(d, vocab) for d in degs)
    # vocabulary [1, 2, 3, 5] for both
    assert x_s.tolist() == [[1, 0, 0, 0], [0, 0, 1, 0]]
    assert x_t.tolist() == [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]


def test_tie_seeds_gives_both_rows_of_a_seed_pair_their_normalised_sum():
    x_s = torch.arange(12.0).view(4, 3)
    x_t = -torch.arange(15.0).view(5, 3) - 1
    s0, t0 = x_s.clone(), x_t.clone()
    tied_s, tied_t = tie_seeds(x_s, x_t, torch.tensor([0, 2]), torch.tensor([4, 1]))
    for i, j in ((0, 4), (2, 1)):
        want = F.normalize(x_s[i], dim=0) + F.normalize(x_t[j], dim=0)
        assert torch.allclose(tied_s[i], want) and torch.equal(tied_s[i], tied_t[j])
    assert torch.equal(tied_s[[1, 3]], x_s[[1, 3]])
    assert torch.equal(tied_t[[0, 2, 3]], x_t[[0, 2, 3]])
    assert torch.equal(x_s, s0) and torch.equal(x_t, t0)  # inputs untouched


def test_random_projection_approximately_preserves_inner_products():
    gen = torch.Generator().manual_seed(0)
    a = F.normalize(torch.randn(40, 300, generator=gen), dim=1)
    b = F.normalize(torch.randn(30, 300, generator=gen), dim=1)
    b[:10] = F.normalize(a[:10] + 0.3 * b[:10], dim=1)  # some strongly similar pairs
    pa_, pb = random_projection([a, b], dim=2048, seed=3)
    assert pa_.shape == (40, 2048) and pb.shape == (30, 2048)
    err = (pa_ @ pb.T - a @ b.T).abs()
    assert err.mean().item() < 0.03
    assert err.max().item() < 0.15


def test_random_projection_uses_one_matrix_for_both_inputs_and_is_seeded():
    gen = torch.Generator().manual_seed(1)
    d = 16
    y = torch.randn(5, d, generator=gen)
    w, py = random_projection([torch.eye(d), y], dim=8, seed=7)  # projecting I recovers W
    torch.testing.assert_close(py, y @ w)
    same = random_projection([y, y], dim=8, seed=7)
    assert torch.equal(same[0], same[1])
    torch.testing.assert_close(same[0], py)
    other = random_projection([y, y], dim=8, seed=8)
    assert not torch.allclose(other[0], py)


def test_validate_accepts_finite_nonzero_rows():
    validate(torch.tensor([[1.0, 0.0], [0.0, -2.0]]), node_named(graph(["a", "b"])))


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_validate_names_node_with_non_finite_feature(bad):
    x = torch.ones(3, 2)
    x[1, 1] = bad
    with pytest.raises(InputError, match=r"g\.tsv: node 'beta' has a NaN or infinite"):
        validate(x, node_named(graph(["alpha", "beta", "gamma"])))


def test_validate_allows_all_zero_rows_and_names_the_first(caplog):
    x = torch.ones(4, 2)
    x[2] = 0.0
    x[3] = 0.0
    with caplog.at_level("WARNING"):
        validate(x, node_named(graph(np.array([10, 20, 30, 40]))))
    assert "2 nodes have no features" in caplog.text and "30" in caplog.text


def test_sentence_vectors_do_not_depend_on_the_names_encoded_beside_them(tmp_path):
    names = [f"{w} {i}" for i in range(150) for w in ("river", "Mount Saint")][:230]
    whole = sentence_vectors(names, cache_dir=tmp_path / "whole")
    parts = torch.cat([sentence_vectors(names[:77], cache_dir=tmp_path / "a"),
                       sentence_vectors(names[77:], cache_dir=tmp_path / "b")])
    assert torch.equal(whole, parts)  # bit for bit: a Ray part's names equal one process's


def test_sentence_vectors_do_not_depend_on_the_threads_encoding_them(tmp_path):
    """Names of 3, 4 and 7 tokens: batches whose bfloat16 products oneDNN split over two
    threads, moving vectors by up to 1.4e-3, before each batch ran on one thread."""
    names = ["Berlin", "Kyoto Station", "Paris", "river Thames", "United States Navy SEALs",
             *[f"Mount {w}" for w in ("Fuji", "Kenya", "Etna", "Hood")]]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sentence_vectors(names, cache_dir=tmp_path / "one")
        torch.set_num_threads(2)
        two = sentence_vectors(names, cache_dir=tmp_path / "two")
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)


def test_sentence_vectors_are_encoded_again_where_the_cache_is_unreadable_or_unwritable(
        tmp_path, caplog):
    names = ["Berlin", "Paris"]
    v = sentence_vectors(names, cache_dir=tmp_path)
    [cached] = tmp_path.glob("minilm-*.npy")
    cached.write_bytes(b"not an array")  # a damaged cache file is replaced
    assert torch.equal(sentence_vectors(names, cache_dir=tmp_path), v)
    assert np.load(cached).shape == (2, 384)
    blocked = tmp_path / "a file"
    blocked.write_text("")
    with caplog.at_level("WARNING"):  # no folder can be made there: the run goes on
        assert torch.equal(sentence_vectors(names, cache_dir=blocked / "cache"), v)
    assert "not cached" in caplog.text and "TFGM_CACHE" in caplog.text


def test_side_by_side_blocks_project_as_their_concatenation():
    gen = torch.Generator().manual_seed(0)
    sparse = torch.rand(6, 9, generator=gen).mul(torch.rand(6, 9, generator=gen) > 0.6)
    sparse[2] = 0  # a name without n-grams stays a zero row
    unit = unit_rows(sparse.to_sparse().coalesce())
    assert torch.allclose(unit.to_dense(), F.normalize(sparse, dim=1))
    dense = torch.rand(6, 4, generator=gen)
    projected = projected_side_by_side([unit, dense], dim=5, seed=3)
    assert torch.allclose(projected, random_projection([torch.cat([unit.to_dense(), dense], 1)],
                                                       dim=5, seed=3)[0], atol=1e-6)


def test_sentence_vectors_encode_offline_and_reuse_the_cache_in_any_order(tmp_path):
    names = ["Berlin", "Paris", "Berlin", "capital of France"]
    v = sentence_vectors(names, cache_dir=tmp_path)
    assert v.shape == (4, 384)
    assert torch.allclose(v.norm(dim=1), torch.ones(4), atol=1e-5)
    assert torch.equal(v[0], v[2])  # same text, same vector
    assert float(v[1] @ v[3]) > float(v[0] @ v[3])  # Paris is nearer its description
    cached = list(tmp_path.glob("minilm-*.npy"))
    assert len(cached) == 1
    again = sentence_vectors(list(reversed(names)), cache_dir=tmp_path)
    assert torch.equal(again, v.flip(0))
    assert list(tmp_path.glob("minilm-*.npy")) == cached


def test_names_in_another_script_are_read_in_latin_letters():
    names = Names.hashed(["Москва", "Québec", "北京", "Berlin"])
    assert names.texts == ["Moskva", "Quebec", "BeiJing", "Berlin"]
    assert torch.equal(names.counts.to_dense()[0], Names.hashed(["MOSKVA"]).counts.to_dense()[0])


def test_graphs_named_in_two_scripts_are_matched_by_their_names():
    """A ring, so that structure cannot tell the nodes apart: only the names, Cyrillic in
    one graph and Latin in the other, can."""
    import tfgm_dist
    cyrillic = ["Москва", "Казань", "Самара", "Омск", "Томск", "Пермь", "Тула", "Сочи",
                "Курск", "Уфа"]
    latin = ["Moskva", "Kazan", "Samara", "Omsk", "Tomsk", "Perm", "Tula", "Sochi", "Kursk",
             "Ufa"]
    n = len(cyrillic)
    ring = pa.table({"src": list(range(n)), "dst": [(i + 1) % n for i in range(n)]})
    order = [3, 7, 0, 9, 5, 1, 8, 2, 6, 4]  # the target's ids are another numbering
    target = pa.table({"src": [order[i] for i in range(n)],
                       "dst": [order[(i + 1) % n] for i in range(n)]})
    result = tfgm_dist.align(
        (ring, pa.table({"id": list(range(n)), "name": cyrillic})),
        (target, pa.table({"id": [order[i] for i in range(n)], "name": latin})))
    best = dict(zip(result.matches["source_id"].to_pylist(),
                    result.matches["target_id"].to_pylist()))
    assert best == {i: order[i] for i in range(n)}


def test_sentence_vectors_in_bfloat16_stay_near_float32_and_are_cached_apart(tmp_path,
                                                                              monkeypatch):
    from tfgm_dist import features
    if features._encoder_dtype() != torch.bfloat16:
        pytest.skip("this CPU multiplies no bfloat16 in hardware: the encoder runs in float32")
    names = ["Berlin", "Kyoto Station", "United States Navy SEALs", "Cartoon Network"]
    low = sentence_vectors(names, cache_dir=tmp_path)
    monkeypatch.setattr(features, "_encoder_dtype", lambda: torch.float32)
    features._encoder.cache_clear()
    try:
        full = sentence_vectors(names, cache_dir=tmp_path)
    finally:
        features._encoder.cache_clear()  # the next test's encoder in bfloat16 again
    assert len(list(tmp_path.glob("minilm-*.npy"))) == 2  # one cache file each
    assert not torch.equal(low, full)
    assert float((low * full).sum(1).min()) > 0.9995
