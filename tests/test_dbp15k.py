"""The DBP15k importer of the benchmarks (``jobs/dbp15k.py``), on small files and the real pair."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.dbp15k import load_dbp15k
from tfgm_dist.graph import Graph, InputError
from tfgm_dist.load import load_pairs

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def edges(g: Graph) -> list[tuple]:
    """Edges in the user's ids, in graph order."""
    ids = g.ids.to_pylist()
    return [(ids[u], ids[v]) for u, v in g.edge_index.t().tolist()]


def test_load_dbp15k_synthetic_with_name_fallback(tmp_path):
    pair = tmp_path / "dbp15k" / "xx_en"
    pair.mkdir(parents=True)
    names = tmp_path / "dbp15k" / "translated_names"
    names.mkdir()
    write(pair, "ent_ids_1", "0\thttp://xx.dbpedia.org/resource/Foo_Bar\n2\thttp://x/r/Baz\n")
    write(pair, "ent_ids_2", "1\thttp://dbpedia.org/resource/Foo\n3\thttp://dbpedia.org/r/Q_(x)\n")
    write(pair, "triples_1", "0\t7\t2\n2\t7\t2\n")
    write(pair, "triples_2", "3\t5\t1\n")
    write(pair, "ref_ent_ids", "0\t1\n2\t3\n")
    write(names, "dbp_xx_en.json", '[[0, ["foo", "bar"]], [1, ["foo"]], [2, []]]')
    source, target, pairs = load_dbp15k(pair)
    assert source.ids.to_pylist() == [0, 2] and target.ids.to_pylist() == [1, 3]
    assert source.names == ["foo bar", "Baz"] and target.names == ["foo", "Q (x)"]
    assert edges(source) == [(0, 2)] and source.stats["self_loops"] == 1
    assert edges(target) == [(3, 1)]
    assert pairs.column_names == ["source_id", "target_id"]
    assert pairs.to_pylist() == [{"source_id": 0, "target_id": 1},
                                 {"source_id": 2, "target_id": 3}]
    write(pair, "triples_2", "3\t5\t1\n3\t5\t8\n")
    with pytest.raises(InputError, match=re.escape(f"{pair / 'triples_2'} edges row 2") +
                       ".*8.*not listed"):
        load_dbp15k(pair)
    write(pair, "triples_2", "3\t5\n")
    with pytest.raises(InputError, match=re.escape(str(pair / "triples_2"))):
        load_dbp15k(pair)


@pytest.mark.skipif(not (DATA / "dbp15k").is_dir(), reason=f"benchmark data not found at {DATA}")
def test_real_dbp15k_zh_en():
    source, target, pairs = load_dbp15k(DATA / "dbp15k" / "zh_en")
    assert (source.num_nodes, target.num_nodes) == (19388, 19572)
    assert pairs.num_rows == 15000
    assert pairs.slice(0, 1).to_pylist() == [{"source_id": 0, "target_id": 10500}]
    assert source.names[:2] == ["abdullah gul", "kim dae jung"]
    assert all(source.names) and all(target.names)
    assert source.stats["input_edges"] == 70414 and target.stats["input_edges"] == 95142
    s, t = load_pairs(DATA / "dbp15k" / "zh_en" / "ref_ent_ids", source, target, "gold")
    assert len(s) == len(t) == 15000 and source.ids[int(s[0])].as_py() == 0
