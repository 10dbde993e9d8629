"""The social benchmark's development pairs and baseline, on pairs written to disk and read back."""
import numpy as np

from jobs.bench_social import noisy_copies, rwr_baseline, wl_ceiling, write_pair
from tfgm_dist.load import load_graph, load_pairs


def grid_edges(side: int) -> np.ndarray:
    """The edges of a ``side x side`` grid: every node but the corners looks like many others."""
    at = np.arange(side * side).reshape(side, side)
    return np.concatenate([np.stack([at[:, :-1].ravel(), at[:, 1:].ravel()], 1),
                           np.stack([at[:-1].ravel(), at[1:].ravel()], 1)])


def test_an_attributed_dev_pair_loads_with_its_words_and_the_words_help_the_baseline(tmp_path):
    edges, n = grid_edges(20), 400
    pair = noisy_copies(edges, n, np.random.default_rng(0), attributed=True)
    paths = write_pair(pair, tmp_path / "pair")
    g_s, g_t = load_graph(paths["source"]), load_graph(paths["target"])
    seeds = load_pairs(paths["seeds"], g_s, g_t, "seeds")
    gold = load_pairs(paths["gold"], g_s, g_t, "gold")
    # every node that has an edge has its row of words, read back by its id
    ids, rows = pair.source_attributes
    at = g_s.index_of(ids.tolist(), "source")
    assert g_s.features.shape == (len(ids), rows.shape[1])
    assert np.array_equal(g_s.features.numpy()[at], rows)
    assert (rows.sum(1) >= 1).all()  # the added word: no node without one
    # the same node's two noisy bags share more words than two different nodes' do
    words = {i: r for i, r in zip(*pair.target_attributes)}
    own = np.mean([rows[list(ids).index(s)] @ words[t] for s, t in pair.gold])
    assert own > 2
    common = dict(num_nodes=(g_s.num_nodes, g_t.num_nodes))
    plain = rwr_baseline(g_s.edge_index.numpy().T, g_t.edge_index.numpy().T, seeds, gold,
                         **common)
    with_words = rwr_baseline(g_s.edge_index.numpy().T, g_t.edge_index.numpy().T, seeds,
                              gold, attributes=(g_s.features.numpy(), g_t.features.numpy()),
                              **common)
    assert with_words["hits@1"] > plain["hits@1"] + 20


def test_the_wl_ceiling_counts_targets_no_structure_can_tell_from_another():
    # a star, hub 0 and leaves 1-4, leaf 1 a seed: leaves 2-4 look alike, the hub is unique
    star = np.array([[0, 1], [0, 2], [0, 3], [0, 4]])
    assert wl_ceiling(star, 5, np.array([1]), np.array([0, 2])) == 50.0
    assert wl_ceiling(star, 5, np.array([1]), np.array([3, 4])) == 0.0
    # a path of 40 seeded at one end: each node's distance to the seed tells it apart, which
    # colour refinement learns one hop per round (deeper than its first 8 rounds)
    path = np.stack([np.arange(39), np.arange(1, 40)], 1)
    assert wl_ceiling(path, 40, np.array([0]), np.arange(1, 40)) == 100.0
    # without the seed, the path's two halves mirror each other
    assert wl_ceiling(path, 40, np.array([], dtype=np.int64), np.arange(40)) == 0.0


def test_an_uneven_dev_pair_keeps_every_node_on_one_side_and_a_third_on_the_other():
    edges, n = grid_edges(30), 900
    pair = noisy_copies(edges, n, np.random.default_rng(0), keep=(1.0, 0.35), edge_drop=0.0)
    sizes = [np.unique(e).size for e in (pair.source_edges, pair.target_edges)]
    assert sizes[0] == n and 0.2 * n < sizes[1] < 0.4 * n  # nodes without edges are gone
    truth = np.concatenate([pair.seeds, pair.gold])
    assert len(truth) <= sizes[1] and np.isin(truth[:, 1], pair.target_edges).all()


def test_a_count_dev_pair_draws_each_copy_from_the_same_rates(tmp_path):
    edges, n = grid_edges(20), 400
    pair = noisy_copies(edges, n, np.random.default_rng(0), attributed=True, counts=17)
    paths = write_pair(pair, tmp_path / "pair")
    g_s = load_graph(paths["source"])
    ids, rows = pair.source_attributes
    assert g_s.features.shape == (len(ids), 17)
    assert np.array_equal(g_s.features.numpy()[g_s.index_of(ids.tolist(), "source")], rows)
    assert (rows >= 0).all() and (rows == np.round(rows)).all() and rows.max() > 1
    # the same node's two draws agree more than two different nodes' do
    counts = {i: r for i, r in zip(*pair.target_attributes)}
    at = {i: k for k, i in enumerate(ids)}
    own = np.mean([np.corrcoef(rows[at[s]], counts[t])[0, 1] for s, t in pair.gold])
    other = np.mean([np.corrcoef(rows[at[s]], counts[t])[0, 1]
                     for (s, _), (_, t) in zip(pair.gold, np.roll(pair.gold, 1, axis=0))])
    assert own > other + 0.3


def test_the_benchmarks_warn_when_every_process_they_start_would_compile_its_imports(
        monkeypatch, capsys, tmp_path):
    import types

    import jobs
    compiled = tmp_path / "torch.pyc"
    monkeypatch.setattr(jobs.importlib.util, "cache_from_source", lambda path: str(compiled))
    monkeypatch.setattr(jobs, "sys", types.SimpleNamespace(
        flags=types.SimpleNamespace(dont_write_bytecode=True), executable="python"))
    jobs.warn_uncompiled()
    assert "compileall" in capsys.readouterr().out
    compiled.touch()  # the bytecode is there: nothing to say
    jobs.warn_uncompiled()
    assert capsys.readouterr().out == ""
