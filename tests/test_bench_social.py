"""The social benchmark's development pairs and baseline, on pairs written to disk and read back."""
import numpy as np

from jobs.bench_social import noisy_copies, rwr_baseline, write_pair
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
