"""The Python API: ``tfgm_dist.align`` on paths and on in-memory tables, read back as Arrow."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tfgm_dist
from tfgm_dist.errors import InputError
from tfgm_dist.synth import write_pair


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("api"), n=1500, seed=3)


def accuracy(matches: pa.Table, gold: pa.Table) -> float:
    truth = dict(zip(gold.column(0).to_pylist(), gold.column(1).to_pylist()))
    best = matches.filter(pa.compute.equal(matches["rank"], 1))
    hits = sum(truth.get(s) == t for s, t in zip(best["source_id"].to_pylist(),
                                                 best["target_id"].to_pylist()))
    return hits / len(truth)


def test_align_on_paths_returns_the_match_table_and_the_metrics(synth):
    result = tfgm_dist.align(synth["source"], synth["target"], top_k=3)
    assert isinstance(result, tfgm_dist.Alignment)
    assert result.matches.column_names == ["source_id", "target_id", "rank", "score",
                                           "confidence"]
    assert set(result.matches["rank"].to_pylist()) == {1, 2, 3}
    assert accuracy(result.matches, pq.read_table(synth["gold"])) > 0.95
    assert result.metrics["auto"]["enabled"] and result.metrics["seconds"]["total"] > 0


def test_tables_give_the_same_matches_as_the_files_they_were_read_from(synth):
    import polars as pl
    on_files = tfgm_dist.align(synth["source"], synth["target"], assign={"method": "argmax"})
    tables = [(pq.read_table(synth[side] / "edges.parquet"),
               pq.read_table(synth[side] / "nodes.parquet")) for side in ("source", "target")]
    on_tables = tfgm_dist.align(*tables, assign={"method": "argmax"})
    assert on_tables.matches.equals(on_files.matches)
    # edges alone (no features: the structure is matched) from polars frames
    frames = [pl.from_arrow(edges) for edges, _ in tables]
    structural = tfgm_dist.align(*frames, search={"k": 5})
    edges = tables[0][0]
    nodes = set(edges["src"].to_pylist()) | set(edges["dst"].to_pylist())
    assert set(structural.matches["source_id"].to_pylist()) == nodes


def test_seeds_as_a_table_are_anchors_and_give_an_estimate(synth):
    gold = pq.read_table(synth["gold"])
    result = tfgm_dist.align(synth["source"], synth["target"], seeds=gold.slice(0, 300))
    assert 0 <= result.metrics["estimate"]["hits@1"] <= 1
    assert result.metrics["estimate"]["held_out"] == 120  # 4 folds of 30
    assert result.matches.num_rows == 1500 - 300  # seed sources are known, not output


def test_bad_input_raises_an_input_error_naming_it(synth):
    with pytest.raises(InputError, match=r"source edges: missing column\(s\) dst"):
        tfgm_dist.align(pa.table({"src": [1, 2]}), synth["target"])
    with pytest.raises(InputError, match="seeds"):
        tfgm_dist.align(synth["source"], synth["target"],
                        seeds=pa.table({"s": ["nope"], "t": ["nope"]}))
    with pytest.raises(InputError, match="expected a path, an edge table"):
        tfgm_dist.align([1, 2], synth["target"])
    with pytest.raises(AttributeError):
        tfgm_dist.no_such_thing
