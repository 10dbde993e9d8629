"""The synthetic generator: what the scale benchmark's inputs promise, read back from Parquet."""
import numpy as np
import pyarrow.parquet as pq
import pytest

from tfgm_dist.load import load_graph, load_pairs
from tfgm_dist.synth import write_pair

N = 20000


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    paths = write_pair(tmp_path_factory.mktemp("synth"), N, seed=7)
    s, t = load_graph(paths["source"]), load_graph(paths["target"])
    return paths, s, t, load_pairs(paths["gold"], s, t, "gold")


def edge_set(ei: np.ndarray) -> set[tuple[int, int]]:
    return set(zip(np.minimum(ei[0], ei[1]).tolist(), np.maximum(ei[0], ei[1]).tolist()))


def test_same_seed_same_files_other_seed_other_graph(tmp_path, pair):
    paths = pair[0]
    again = write_pair(tmp_path / "again", N, seed=7)
    other = write_pair(tmp_path / "other", N, seed=8)
    for name in ("source/edges.parquet", "source/nodes.parquet", "target/edges.parquet",
                 "target/nodes.parquet", "gold.parquet"):
        a = pq.read_table(paths["source"].parent / name)
        assert a.equals(pq.read_table(again["source"].parent / name)), name
    assert not pq.read_table(paths["source"] / "edges.parquet").equals(
        pq.read_table(other["source"] / "edges.parquet"))


def test_power_law_degrees_with_mean_ten(pair):
    _, s, _, _ = pair
    deg = np.bincount(s.edge_index.numpy().ravel(), minlength=N)
    assert 2 * s.num_edges / N >= 10 - 1e-9
    assert deg.max() >= 20 * deg.mean()  # a heavy tail, not a Poisson graph's ~2x


def test_target_loses_five_percent_of_edges_and_gains_as_many(pair):
    _, s, t, (gold_s, gold_t) = pair
    to_target = np.empty(N, dtype=np.int64)
    to_target[gold_s] = gold_t
    mapped = edge_set(to_target[s.edge_index.numpy()])
    target = edge_set(t.edge_index.numpy())
    kept = len(mapped & target) / len(mapped)
    added = len(target - mapped) / len(mapped)
    assert kept == pytest.approx(0.95, abs=0.002)
    assert added == pytest.approx(0.05, abs=0.005)


def test_ids_are_permuted_and_features_are_noisy_copies(pair):
    _, s, t, (gold_s, gold_t) = pair
    assert gold_s.size == N and (gold_s != gold_t).mean() > 0.99
    assert s.features.shape == t.features.shape == (N, 128)
    x, y = s.features[gold_s], t.features[gold_t]
    noise = (y - x).std().item()
    assert noise == pytest.approx(0.5, rel=0.02)


def test_feature_dim_zero_writes_a_structure_only_pair(tmp_path):
    paths = write_pair(tmp_path, 500, seed=1, feature_dim=0)
    assert pq.read_table(paths["source"] / "nodes.parquet").column_names == ["id"]
    s = load_graph(paths["source"])
    assert s.num_nodes == 500 and s.features is None


@pytest.mark.parametrize("option", [{"feature_dim": -1}, {"edge_noise": 1.5},
                                    {"mean_degree": 0}])
def test_bad_synthetic_options_are_refused_before_anything_is_written(tmp_path, option):
    from tfgm_dist.errors import InputError
    with pytest.raises(InputError, match="synthetic pair"):
        write_pair(tmp_path / "out", 100, **option)
    assert not (tmp_path / "out").exists()
