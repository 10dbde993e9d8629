"""Tests of stage 1 (load): every format to the canonical Graph, and every bad input to one
InputError line naming the file and the line, row or id."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.dbp15k import load_dbp15k
from tfgm_dist.errors import InputError
from tfgm_dist.graph import Graph
from tfgm_dist.load import load_graph, load_id_list, load_pairs, tables

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(not DATA.is_dir(),
                                reason=f"benchmark data not found at {DATA}")


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def edges(g: Graph) -> list[tuple]:
    """Edges in the user's ids, in graph order."""
    ids = g.ids.to_pylist()
    return [(ids[u], ids[v]) for u, v in g.edge_index.t().tolist()]


def raises(*fragments: str):
    """pytest.raises(InputError) whose one-line message contains every fragment."""
    return pytest.raises(InputError, match="(?s)" + "".join(
        f"(?=.*{re.escape(str(f))})" for f in fragments))


# --- edge lists --------------------------------------------------------------------------------


def test_edge_list_int_ids_comments_and_first_appearance_order(tmp_path):
    path = write(tmp_path, "g.txt", "# comment\n\n5 3\n% other comment\n  3   9 \n9\t5\n")
    g = load_graph(path)
    assert g.ids.type == pa.int64()
    assert g.ids.to_pylist() == [5, 3, 9]
    assert edges(g) == [(5, 3), (3, 9), (9, 5)]
    assert g.edge_index.dtype == torch.int64 and g.edge_weight is None
    assert g.source == str(path)
    assert g.stats == {"input_edges": 3, "self_loops": 0, "duplicate_edges": 0}


def test_edge_list_string_ids(tmp_path):
    g = load_graph(write(tmp_path, "g.edges", "alice bob\nbob carol\n7 alice\n"))
    assert g.ids.type == pa.string()
    assert g.ids.to_pylist() == ["alice", "bob", "carol", "7"]
    assert edges(g) == [("alice", "bob"), ("bob", "carol"), ("7", "alice")]


def test_edge_list_non_canonical_integers_stay_strings(tmp_path):
    # "007" and "0x1" would not print back as read, so the ids stay strings.
    g = load_graph(write(tmp_path, "g.txt", "007 1\n0x1 1\n"))
    assert g.ids.to_pylist() == ["007", "1", "0x1"]


def test_edge_list_drops_self_loops_and_duplicates_keeps_direction(tmp_path):
    g = load_graph(write(tmp_path, "g", "1 2\n2 1\n1 2\n3 3\n2 3\n3 3\n"))
    assert edges(g) == [(1, 2), (2, 1), (2, 3)]
    assert g.ids.to_pylist() == [1, 2, 3]  # a node seen only in a self-loop is still a node
    assert g.stats == {"input_edges": 6, "self_loops": 2, "duplicate_edges": 1}


def test_csv_with_header_and_weights_keeps_first_duplicate_weight(tmp_path):
    g = load_graph(write(tmp_path, "g.csv", "src,dst,weight\na, b, 0.5\nb,c,2\na,b,9\n"))
    assert edges(g) == [("a", "b"), ("b", "c")]
    assert g.edge_weight.dtype == torch.float32
    assert g.edge_weight.tolist() == [0.5, 2.0]


def test_tsv_header_detected_by_non_numeric_weight(tmp_path):
    g = load_graph(write(tmp_path, "g.tsv", "node1\tnode2\tscore\n1\t2\t1e-3\n"))
    assert edges(g) == [(1, 2)]
    assert g.edge_weight.tolist() == pytest.approx([1e-3])


@pytest.mark.parametrize("header", ["source target", "u v", "from to", "SRC DST", "node1 node2",
                                    "user_a user_b"])
def test_whitespace_header_by_name(tmp_path, header):
    assert edges(load_graph(write(tmp_path, "g.txt", f"{header}\n1 2\n"))) == [(1, 2)]


def test_a_first_line_of_names_above_numbers_is_a_header_and_strings_stay_ids(tmp_path):
    g = load_graph(write(tmp_path, "g.csv", "left,right,w\n1,2,0.5\n"))
    assert edges(g) == [(1, 2)] and g.edge_weight.tolist() == [0.5]
    s, t = load_pairs(write(tmp_path, "seeds.tsv", "a_id\tb_id\n1\t2\n"), g, g, "seeds")
    assert (s.tolist(), t.tolist()) == ([0], [1])
    named = load_graph(write(tmp_path, "s.txt", "alice bob\nbob carol\n"))  # ids, not names
    assert named.ids.to_pylist() == ["alice", "bob", "carol"]


def test_a_first_line_of_pairs_that_are_no_nodes_above_pairs_of_nodes_is_a_header(tmp_path):
    """Where ids are strings a header looks like data to the text reader; in a file of ids
    it is a first line none of whose ids is a node, above a line of nodes. One unknown id
    beside a node is an error, as anywhere."""
    s = load_graph(write(tmp_path, "s.csv", "a0,a1\na1,a2\n"))
    t = load_graph(write(tmp_path, "t.csv", "b0,b1\nb1,b2\n"))
    pairs = load_pairs(write(tmp_path, "seeds.csv", "flickr,lastfm\na1,b2\na0,b1\n"), s, t,
                       "seeds")
    assert [p.tolist() for p in pairs] == [[1, 0], [2, 1]]
    assert load_id_list(write(tmp_path, "q.csv", "user\na2\n"), s, "queries").tolist() == [2]
    with pytest.raises(InputError, match=r"seeds.csv line 1: id 'a9' is not a node"):
        load_pairs(write(tmp_path, "seeds.csv", "a9,b1\na1,b2\n"), s, t, "seeds")


def test_a_first_line_of_column_names_above_string_ids_is_a_header_unless_its_ids_recur(
        tmp_path):
    """``user_a,user_b`` above string ids had become an edge between two nodes named so."""
    g = load_graph(write(tmp_path, "g.csv", "user_a,user_b\nalice,bob\nbob,carol\n"))
    assert edges(g) == [("alice", "bob"), ("bob", "carol")]
    g = load_graph(write(tmp_path, "g.tsv", "from_id\tto_id\tw\nx\ty\t0.5\n"))
    assert edges(g) == [("x", "y")] and g.edge_weight.tolist() == [0.5]
    # ids spelled like column names that recur below are data
    g = load_graph(write(tmp_path, "h.csv", "node1,node2\nnode2,node3\n"))
    assert edges(g) == [("node1", "node2"), ("node2", "node3")]


def test_triples_by_name_and_by_extension(tmp_path):
    text = "1\tborn_in\t2\n2\tpart_of\t3\n1\tborn_in\t3\n"
    for name in ("triples_1", "kg.triples", "rel_triples_1"):  # JAPE, any, OpenEA
        g = load_graph(write(tmp_path, name, text))
        assert edges(g) == [(1, 2), (2, 3), (1, 3)]
        assert g.stats["relations"] == 2


def test_triples_keep_every_relation_as_roles_of_its_heads_and_tails(tmp_path):
    lines = ["1\tborn_in\t2", "2\tpart_of\t3", "1\tborn_in\t3", "1\tpart_of\t2"]
    expected = {(1, 0), (2, 1), (3, 1),  # born_in (first in sort order): heads 0, tails 1
                (2, 2), (1, 2), (3, 3), (2, 3)}  # part_of: its edge 1 -> 2 repeats born_in's
    for order in (lines, lines[::-1]):  # the order of the lines changes nothing
        g = load_graph(write(tmp_path, "kg.triples", "\n".join(order) + "\n"))
        assert g.num_edges == 3  # 1 -> 2 once
        ids = g.ids.to_numpy()
        roles = {(int(ids[n]), int(r)) for n, r in g.roles.T.tolist()}
        assert roles == expected and g.roles.size(1) == len(expected)
        shuffled = g.permuted(torch.tensor([2, 0, 1]))  # the roles follow their nodes
        ids = shuffled.ids.to_numpy()
        assert {(int(ids[n]), int(r)) for n, r in shuffled.roles.T.tolist()} == expected
    assert load_graph(write(tmp_path, "g.tsv", "1\t2\n")).roles is None  # an edge list has none


def test_uri_ids_are_named_by_their_local_names_and_codes_are_not_names(tmp_path):
    text = ("<http://dbpedia.org/resource/Kyoto_Station>\tnear\t"
            "http://x.org/kg#Caf%C3%A9_M%C3%BCller\n"
            "http://dbpedia.org/resource/Kyoto_Station\tin\thttp://dbpedia.org/resource/Kyoto/\n")
    g = load_graph(write(tmp_path, "rel_triples_1", text))
    assert g.names == ["Kyoto Station", "Café Müller", "Kyoto Station", "Kyoto"]
    assert g.names_from_ids
    codes = "http://www.wikidata.org/entity/Q42 p http://www.wikidata.org/entity/Q1\n"
    plain = "ab\tr\tcd\n"  # not URIs
    for name, body in (("codes_triples", codes), ("plain_triples", plain)):
        g = load_graph(write(tmp_path, name, body))
        assert g.names is None and not g.names_from_ids
    given = load_graph(write(tmp_path, "named", "http://a.org/x http://a.org/y\n"))
    assert given.names == ["x", "y"]  # an edge list of URIs too


def test_jape_triples_read_their_names_from_ent_ids_beside_them(tmp_path, caplog):
    write(tmp_path, "ent_ids_1", "0\thttp://fr.dbpedia.org/resource/Paris\n"
          "1\thttp://fr.dbpedia.org/resource/Île-de-France\n7\thttp://fr.dbpedia.org/r/x\n")
    g = load_graph(write(tmp_path, "triples_1", "1\t5\t0\n"))
    assert g.ids.to_pylist() == [1, 0] and g.names == ["Île-de-France", "Paris"]
    assert g.names_from_ids
    g = load_graph(write(tmp_path, "triples_2", "1\t5\t0\n"))  # no ent_ids_2
    assert g.names is None
    write(tmp_path, "ent_ids_3", "0\thttp://a.org/x\n")
    with caplog.at_level("WARNING"):
        g = load_graph(write(tmp_path, "triples_3", "1\t5\t0\n"))
    assert g.names is None
    assert f"it does not list entity 1 of {tmp_path / 'triples_3'}" in caplog.text


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".zst"])
def test_compressed_text_reads_as_its_inner_suffix_says(tmp_path, suffix):
    text = "src,dst,weight\na,b,0.5\nb,c,2\n"
    plain = load_graph(write(tmp_path, "g.csv", text))
    path = tmp_path / f"g.csv{suffix}"
    with pa.output_stream(str(path), compression="detect") as out:
        out.write(text.encode())
    packed = load_graph(path)
    assert edges(packed) == edges(plain) == [("a", "b"), ("b", "c")]
    assert torch.equal(packed.edge_weight, plain.edge_weight)
    triples = tmp_path / "rel_triples_1.gz"
    with pa.output_stream(str(triples), compression="detect") as out:
        out.write(b"x r y\n")
    assert edges(load_graph(triples)) == [("x", "y")]


@pytest.mark.parametrize("listing", ["ent_ids_1", "ent_ids_1.gz"])
def test_compressed_jape_triples_read_their_names_from_ent_ids_beside_them(tmp_path, listing):
    with pa.output_stream(str(tmp_path / "triples_1.gz"), compression="detect") as out:
        out.write(b"1\t5\t2\n")
    with pa.output_stream(str(tmp_path / listing), compression="detect") as out:
        out.write(b"1\thttp://dbpedia.org/resource/Kyoto_Station\n"
                  b"2\thttp://dbpedia.org/resource/Kyoto\n")
    assert load_graph(tmp_path / "triples_1.gz").names == ["Kyoto Station", "Kyoto"]


def test_a_file_not_in_the_compression_of_its_suffix_is_one_line(tmp_path):
    path = write(tmp_path, "g.tsv.gz", "1\t2\n")
    with raises(str(path), "cannot read"):
        load_graph(path)


def test_fmt_overrides_extension(tmp_path):
    path = write(tmp_path, "g.dat", "a r b\n")
    with raises(str(path), "--format", "fmt="):
        load_graph(path)
    assert edges(load_graph(path, fmt="triples")) == [("a", "b")]
    with raises(str(path), "line 1", "weight 'b' is not a number", "--format triples"):
        load_graph(path, fmt="edgelist")
    with raises(str(path), "unknown format 'xml'"):
        load_graph(path, fmt="xml")


# --- LEDA --------------------------------------------------------------------------------------

LEDA = """LEDA.GRAPH
string
short
-2
3
|{PAP1}|
|{SSU72}|
|{MPE1}|
3
1 2 0 |{}|
2 3 0 |{}|
3 3 0 |{}|
"""


def test_leda(tmp_path):
    g = load_graph(write(tmp_path, "g.gw", LEDA))
    assert g.ids.to_pylist() == ["PAP1", "SSU72", "MPE1"]
    assert edges(g) == [("PAP1", "SSU72"), ("SSU72", "MPE1")]
    assert g.stats["self_loops"] == 1


def test_leda_unlabelled_nodes_use_their_index(tmp_path):
    text = LEDA.replace("PAP1", "").replace("SSU72", "").replace("MPE1", "")
    g = load_graph(write(tmp_path, "g.gw", text))
    assert g.ids.to_pylist() == [1, 2, 3]


@pytest.mark.parametrize("bad, line, message", [
    (LEDA.replace("LEDA.GRAPH", "GRAPH"), 1, "expected the header LEDA.GRAPH"),
    (LEDA.replace("\n3\n1 2", "\nthree\n1 2"), 9, "expected the edge count"),
    (LEDA.replace("|{MPE1}|", "MPE1"), 8, "expected a node label"),
    (LEDA.replace("|{MPE1}|", "|{PAP1}|"), 8, "repeats line 6"),
    (LEDA.replace("2 3 0", "2 4 0"), 11, "outside 1..3"),
    (LEDA.replace("2 3 0", "2 x 0"), 11, "expected an edge"),
    (LEDA + "1 3 0 |{}|\n", 13, "more lines than the 3 edges declared on line 9"),
])
def test_leda_malformed(tmp_path, bad, line, message):
    path = write(tmp_path, "g.gw", bad)
    with raises(f"{path} line {line}", message):
        load_graph(path)


def test_leda_too_few_edges(tmp_path):
    path = write(tmp_path, "g.gw", LEDA.replace("3 3 0 |{}|\n", ""))
    with raises(str(path), "ends early, expected 3 edges"):
        load_graph(path)


# --- Parquet layout ----------------------------------------------------------------------------


def parquet_dir(tmp_path: Path, edges_table: dict, nodes_table: dict | None = None,
                row_group_size: int | None = None) -> Path:
    directory = tmp_path / "graph"
    directory.mkdir()
    pq.write_table(pa.table(edges_table), directory / "edges.parquet",
                   row_group_size=row_group_size)
    if nodes_table is not None:
        pq.write_table(pa.table(nodes_table), directory / "nodes.parquet")
    return directory


def test_parquet_without_nodes_streams_row_groups(tmp_path):
    directory = parquet_dir(tmp_path, {"src": ["x", "y", "z", "x"], "dst": ["y", "z", "x", "y"],
                                       "weight": [1.0, 2.0, 3.0, 4.0]}, row_group_size=1)
    assert pq.ParquetFile(directory / "edges.parquet").num_row_groups == 4
    g = load_graph(directory)
    assert g.ids.to_pylist() == ["x", "y", "z"]
    assert edges(g) == [("x", "y"), ("y", "z"), ("z", "x")]
    assert g.edge_weight.tolist() == [1.0, 2.0, 3.0]
    assert g.stats["duplicate_edges"] == 1 and g.source == str(directory)


def test_one_parquet_file_of_edges_is_the_layout_without_nodes(tmp_path):
    directory = parquet_dir(tmp_path, {"follower": [3, 1, 2, 3], "followee": [1, 2, 3, 1],
                                       "w": [0.5, 1.0, 2.0, 4.0]})
    file = tmp_path / "edges.parquet"
    (directory / "edges.parquet").rename(file)
    (directory / "edges.parquet").mkdir()  # the layout again, its edges as one part file
    pq.write_table(pq.read_table(file), directory / "edges.parquet" / "part-00000.parquet")
    columns = "src=follower,dst=followee,weight=w"
    g = load_graph(file, columns=columns)
    assert edges(g) == edges(load_graph(directory, columns=columns)) == [(3, 1), (1, 2), (2, 3)]
    # a folder of part files named so, as Spark writes one
    assert edges(load_graph(directory / "edges.parquet", columns=columns)) == edges(g)
    assert g.edge_weight.tolist() == [0.5, 1.0, 2.0] and g.stats["duplicate_edges"] == 1
    with raises(str(file), "follower"):  # without the mapping: the columns it lacks
        load_graph(file)
    (tmp_path / "g.txt").write_text("1 2\n")
    with raises(str(tmp_path / "g.txt"), "or a .parquet file of edges"):
        load_graph(tmp_path / "g.txt", "parquet")


def test_parquet_with_nodes_names_and_features(tmp_path):
    directory = parquet_dir(
        tmp_path, {"src": pa.array([30, 10], pa.int32()), "dst": pa.array([10, 20], pa.int32())},
        {"id": [10, 20, 30, 40], "name": ["ten", "twenty", "thirty", "forty"],
         "features": [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, 0.5]]})
    g = load_graph(directory)
    assert g.ids.type == pa.int64() and g.ids.to_pylist() == [10, 20, 30, 40]
    assert edges(g) == [(30, 10), (10, 20)]
    assert g.names == ["ten", "twenty", "thirty", "forty"]
    assert g.features.dtype == torch.float32 and g.features.shape == (4, 2)
    assert g.features[3].tolist() == [0.5, 0.5]


def test_parquet_names_and_features_deferred_are_read_by_any_share_of_the_nodes(tmp_path):
    """Left in nodes.parquet (a folder of part files here), the content reads back for any
    nodes in any order, through the numbering by id and the target's shuffle, as the
    whole load reads it; the types are checked at load."""
    directory = tmp_path / "graph"
    (directory / "nodes.parquet").mkdir(parents=True)
    ids, names = [40, 10, 30, 20, 50], ["forty", "ten", "thirty", "twenty", "fifty"]
    vectors = [[4.0, 0.0], [1.0, 0.0], [3.0, 0.0], [2.0, 0.0], [5.0, 0.0]]
    for i, at in enumerate((slice(0, 2), slice(2, 5))):
        pq.write_table(pa.table({"id": ids[at], "name": names[at], "features": vectors[at]}),
                       directory / "nodes.parquet" / f"part-{i:05d}.parquet")
    pq.write_table(pa.table({"src": [10, 20, 30], "dst": [20, 30, 40]}),
                   directory / "edges.parquet")
    whole, deferred = load_graph(directory), load_graph(directory, deferred=True)
    assert deferred.names is None and deferred.features is None
    assert deferred.has_names and deferred.has_features and deferred.feature_width == 2
    assert not deferred.names_from_ids
    perm = torch.tensor([3, 0, 4, 1, 2])
    for g, d in ((whole, deferred), (whole.by_id(), deferred.by_id()),
                 (whole.by_id().permuted(perm), deferred.by_id().permuted(perm))):
        read = d.with_content()
        assert read.content is None and read.names == g.names
        assert torch.equal(read.features, g.features)
        nodes = np.array([4, 0, 2])
        part = d.of_nodes(nodes)
        assert part.content.names(np.arange(3)) == [g.names[i] for i in nodes]
        assert torch.equal(part.content.features(np.arange(3)), g.features[nodes])
        assert torch.equal(d.feature_rows(torch.from_numpy(nodes)), g.features[nodes])
        assert part.ids.to_pylist() == [g.ids[i].as_py() for i in nodes]
    pq.write_table(pa.table({"id": ids, "features": ["1", "2", "3", "4", "5"]}),
                   tmp_path / "nodes.parquet")
    (directory / "nodes.parquet" / "part-00001.parquet").unlink()
    (directory / "nodes.parquet" / "part-00000.parquet").unlink()
    (tmp_path / "nodes.parquet").rename(directory / "nodes.parquet" / "part-00000.parquet")
    with raises(str(directory / "nodes.parquet"), "column features has type string"):
        load_graph(directory, deferred=True)


def test_parquet_deferred_bad_features_name_the_node_when_its_part_reads_them(tmp_path):
    directory = parquet_dir(tmp_path, {"src": ["a", "b"], "dst": ["b", "c"]},
                            {"id": ["a", "b", "c"],
                             "features": [[1.0, 2.0], [float("nan"), 0.0], [1.0, 1.0]]})
    g = load_graph(directory, deferred=True)  # the values are read where they are used
    assert torch.equal(g.of_nodes(np.array([2, 0])).content.features(np.arange(2)),
                       torch.tensor([[1.0, 1.0], [1.0, 2.0]]))
    with raises(str(directory / "nodes.parquet"), "node 'b' has a NaN"):
        g.of_nodes(np.array([1, 2])).content.features(np.arange(2))


def test_parquet_deferred_names_and_vectors_are_read_in_one_pass(tmp_path, monkeypatch):
    """A graph whose nodes.parquet holds names and vectors reads both in one pass over the
    file, not one per column."""
    directory = parquet_dir(tmp_path, {"src": ["a", "b"], "dst": ["b", "c"]},
                            {"id": ["c", "a", "b"], "name": ["cc", "aa", "bb"],
                             "features": [[3.0], [1.0], [2.0]]})
    whole, deferred = load_graph(directory), load_graph(directory, deferred=True)
    passes, real = [], tables.streamed_batches
    monkeypatch.setattr(tables, "streamed_batches",
                        lambda path, columns: passes.append(columns) or real(path, columns))
    read = deferred.with_content()
    assert passes == [["id", "name", "features"]]
    assert read.names == whole.names and torch.equal(read.features, whole.features)
    assert deferred.content.read(np.array([2, 0]), features=False) == (["bb", "cc"], None)


def test_parquet_deferred_content_of_a_file_shortened_since_the_load_is_one_error(tmp_path):
    """A part reads its rows of nodes.parquet after the driver read the ids: a file that
    lost rows meanwhile (a writer replacing it) is an error naming it, not rows left as
    they were allocated."""
    directory = parquet_dir(tmp_path, {"src": ["a", "b"], "dst": ["b", "c"]},
                            {"id": ["a", "b", "c", "d"], "name": ["aa", "bb", "cc", "dd"],
                             "features": [[1.0], [2.0], [3.0], [4.0]]})
    g = load_graph(directory, deferred=True)
    pq.write_table(pa.table({"id": ["a", "b"], "name": ["aa", "bb"], "features": [[1.0], [2.0]]}),
                   directory / "nodes.parquet")
    assert g.of_nodes(np.array([1, 0])).content.names(np.arange(2)) == ["bb", "aa"]
    for read in (lambda c: c.names(np.arange(2)), lambda c: c.features(np.arange(2))):
        with raises(str(directory / "nodes.parquet"), "2 rows, fewer than when the job read "
                    "its ids (4 at least)"):
            read(g.of_nodes(np.array([1, 3])).content)


def test_parquet_part_file_folders_as_spark_writes_them_read_in_path_order(tmp_path):
    directory = tmp_path / "graph"
    for name, parts in (("edges.parquet", [{"src": [3, 1], "dst": [1, 2]},
                                           {"src": [2], "dst": [4]}]),
                        ("nodes.parquet", [{"id": [4, 3]}, {"id": [2, 1]}])):
        folder = directory / name
        (folder / "day=1").mkdir(parents=True)
        for i, part in enumerate(parts):  # the second part in a partition folder
            where = folder / "day=1" if i else folder
            pq.write_table(pa.table(part), where / f"part-{i:05d}-9c1e.snappy.parquet")
        (folder / "_SUCCESS").write_text("")
        (folder / ".part-00000-9c1e.snappy.parquet.crc").write_bytes(b"\x00crc")
    g = load_graph(directory)
    # parts in sorted path order: day=1/part-00001 comes before part-00000
    assert g.ids.to_pylist() == [2, 1, 4, 3]
    assert edges(g) == [(2, 4), (3, 1), (1, 2)]
    (directory / "edges.parquet" / "day=1" / "part-00001-9c1e.snappy.parquet").unlink()
    (directory / "edges.parquet" / "part-00000-9c1e.snappy.parquet").unlink()
    with raises(str(directory / "edges.parquet"), "without Parquet part files"):
        load_graph(directory)


def test_delta_tables_read_at_their_current_version(tmp_path):
    """A Delta table of edges (the input itself, or edges.parquet / nodes.parquet of the
    layout) and of seed pairs: the current version only, not the files of replaced ones."""
    from deltalake import write_deltalake
    table = tmp_path / "edges"
    write_deltalake(table, pa.table({"src": [9, 9], "dst": [8, 7], "day": ["1", "1"]}),
                    partition_by=["day"])
    write_deltalake(table, pa.table({"src": [3, 1], "dst": [1, 2], "day": ["2", "2"]}),
                    mode="overwrite", partition_by=["day"])  # 9-8, 9-7 stay on disk, removed
    write_deltalake(table, pa.table({"src": [2], "dst": [4], "day": ["3"]}), mode="append",
                    partition_by=["day"])
    g = load_graph(table)
    assert sorted(edges(g)) == [(1, 2), (2, 4), (3, 1)] and g.num_nodes == 4
    layout = tmp_path / "graph"
    layout.mkdir()
    table.rename(layout / "edges.parquet")
    write_deltalake(layout / "nodes.parquet", pa.table({"id": [4, 3, 2, 1]}))
    g = load_graph(layout)
    assert g.ids.to_pylist() == [4, 3, 2, 1] and sorted(edges(g)) == [(1, 2), (2, 4), (3, 1)]
    write_deltalake(tmp_path / "seeds", pa.table({"s": [3], "t": [4]}))
    assert [a.tolist() for a in load_pairs(tmp_path / "seeds", g, g, "seeds")] == [[1], [0]]
    (tmp_path / "seeds" / "_delta_log" / "00000000000000000000.json").write_text("{broken")
    with raises(str(tmp_path / "seeds"), "not a readable Delta table"):
        load_pairs(tmp_path / "seeds", g, g, "seeds")


def test_parquet_columns_under_the_users_names(tmp_path):
    directory = parquet_dir(tmp_path, {"follower": ["a", "b"], "followee": ["b", "c"],
                                       "w": [1.0, 2.0]},
                            {"user_id": ["c", "b", "a"], "title": ["C", "B", "A"]})
    g = load_graph(directory, columns="src=follower, dst=followee,weight=w,id=user_id,name=title")
    assert g.ids.to_pylist() == ["c", "b", "a"] and g.names == ["C", "B", "A"]
    assert edges(g) == [("a", "b"), ("b", "c")] and g.edge_weight.tolist() == [1.0, 2.0]
    with raises("edges.parquet", "missing column(s) from", "has follower, followee, w"):
        load_graph(directory, columns="src=from,dst=followee,id=user_id")
    with raises("columns", "'source=follower'",
                "src, dst, weight, relation, id, name, features"):
        load_graph(directory, columns="source=follower")
    text = write(tmp_path, "g.tsv", "a\tb\n")
    with raises("g.tsv", "read by position"):
        load_graph(text, columns="src=follower")


def test_a_relation_column_gives_the_roles_that_triples_give(tmp_path):
    heads, tails = ["1", "2", "1", "1"], ["2", "3", "3", "2"]
    relations = ["born_in", "part_of", "born_in", "part_of"]
    triples = load_graph(write(tmp_path, "kg.triples", "".join(
        f"{h}\t{r}\t{t}\n" for h, r, t in zip(heads, relations, tails))))
    directory = parquet_dir(tmp_path, {"h": [int(h) for h in heads], "p": relations,
                                       "t": [int(t) for t in tails]})
    table = load_graph(directory, columns="src=h,dst=t,relation=p")
    assert table.ids.equals(triples.ids) and torch.equal(table.roles, triples.roles)
    assert load_graph(directory, columns="src=h,dst=t").roles is None  # no relation column
    (tmp_path / "nulls").mkdir()
    nulls = parquet_dir(tmp_path / "nulls", {"src": [1, 2], "dst": [2, 3],
                                             "relation": ["r", None]})
    with raises(f"{nulls / 'edges.parquet'} row 2", "column relation is null"):
        load_graph(nulls)


def test_parquet_unknown_node_names_id_and_row(tmp_path):
    directory = parquet_dir(tmp_path, {"src": ["a", "b", "a"], "dst": ["b", "a", "q"]},
                            {"id": ["a", "b"]}, row_group_size=2)
    with raises(f"{directory / 'edges.parquet'} row 3", "'q'", "nodes.parquet"):
        load_graph(directory)


@pytest.mark.parametrize("features, message", [
    ([[1.0, 2.0], [float("nan"), 0.0]], "node 'b' has a NaN"),
    ([[1.0, 2.0], [float("inf"), 0.0]], "node 'b' has a NaN, infinite"),
    ([[1.0, 2.0], [1.0]], "node 'b' has 1 features"),
])
def test_parquet_bad_features_name_the_node(tmp_path, features, message):
    directory = parquet_dir(tmp_path, {"src": ["a"], "dst": ["b"]},
                            {"id": ["a", "b"], "features": features})
    with raises(str(directory / "nodes.parquet"), message):
        load_graph(directory)


def test_parquet_malformed(tmp_path):
    directory = parquet_dir(tmp_path, {"u": [1], "v": [2]})
    with raises(str(directory / "edges.parquet"), "missing column(s) src, dst"):
        load_graph(directory)
    (tmp_path / "empty").mkdir()
    with raises(str(tmp_path / "empty" / "edges.parquet"), "no such file"):
        load_graph(tmp_path / "empty")
    (tmp_path / "empty" / "edges.parquet").write_text("not parquet")
    with raises(str(tmp_path / "empty" / "edges.parquet"), "not a readable Parquet file"):
        load_graph(tmp_path / "empty")


def test_parquet_duplicate_node_and_null_edge(tmp_path):
    directory = parquet_dir(tmp_path, {"src": [1, None], "dst": [2, 1]}, {"id": [1, 2, 1]})
    with raises(str(directory / "nodes.parquet"), "row 3", "lists node 1 twice", "row 1"):
        load_graph(directory)
    (directory / "nodes.parquet").unlink()
    with raises(f"{directory / 'edges.parquet'} row 2", "column src is null"):
        load_graph(directory)


def test_parquet_empty_edges(tmp_path):
    directory = parquet_dir(tmp_path, {"src": pa.array([], pa.int64()),
                                       "dst": pa.array([], pa.int64())})
    with raises(str(directory / "edges.parquet"), "no edges"):
        load_graph(directory)


# --- malformed text ----------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with raises(str(tmp_path / "nope.txt"), "no such file"):
        load_graph(tmp_path / "nope.txt")


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "src dst\n"])
def test_empty_file(tmp_path, text):
    path = write(tmp_path, "g.txt", text)
    with raises(str(path), "no data lines"):
        load_graph(path)


@pytest.mark.parametrize("name, text, line, message", [
    ("g.txt", "1 2\n# c\n1 2 3 4\n", 3, "expected 2 columns like line 1, got 4"),
    ("g.txt", "1\n", 1, "expected 2 or 3 columns, got 1"),
    ("g.txt", "1 2 0.5\n\n3 4 heavy\n", 3, "weight 'heavy' is not a number"),
    ("g.txt", "1 2 0.5\n3 4 nan\n", 2, "weight 'nan' is not a finite"),
    ("g.txt", "1 2 1e300\n", 1, "weight '1e300' is not a finite float32"),
    ("g.csv", "1,2\n3,\n", 2, "column 2 is empty"),
])
def test_malformed_edge_list_names_file_and_line(tmp_path, name, text, line, message):
    path = write(tmp_path, name, text)
    with raises(f"{path} line {line}:", message):
        load_graph(path)


def test_not_utf8(tmp_path):
    path = tmp_path / "g.txt"
    path.write_bytes(b"1 2\n3 \xff\n")
    with raises(f"{path} line 2", "not UTF-8"):
        load_graph(path)


# --- pairs and id lists ------------------------------------------------------------------------


@pytest.fixture
def int_graphs(tmp_path):
    return (load_graph(write(tmp_path, "s.txt", "1 2\n2 3\n")),
            load_graph(write(tmp_path, "t.txt", "30 20\n20 10\n")))


def test_load_pairs_text_and_parquet(tmp_path, int_graphs):
    source, target = int_graphs
    s, t = load_pairs(write(tmp_path, "p.tsv", "source_id\ttarget_id\n1\t10\n3\t30\n"),
                      source, target, "seeds")
    assert s.dtype == np.int64 and s.tolist() == [0, 2] and t.tolist() == [2, 0]
    pq.write_table(pa.table({"a": [3, 2], "b": ["30", "20"]}), tmp_path / "p.parquet")
    s, t = load_pairs(tmp_path / "p.parquet", source, target, "seeds")
    assert s.tolist() == [2, 1] and t.tolist() == [0, 1]


def test_load_pairs_string_graph(tmp_path):
    source = load_graph(write(tmp_path, "s.txt", "a b\n"))
    target = load_graph(write(tmp_path, "t.txt", "B A\n"))
    s, t = load_pairs(write(tmp_path, "p.csv", "a,A\nb, B\n"), source, target, "seeds")
    assert s.tolist() == [0, 1] and t.tolist() == [1, 0]


@pytest.mark.parametrize("text, line, message", [
    ("1 10\n3 99\n", 2, "id 99 is not a node of"),
    ("1 10\n2 20\n1 30\n", 3, "maps node 1 twice (also at line 1)"),
    ("1 10\n2 10\n", 2, "maps node 10 twice"),
    ("1 10\ntwo 20\n", 2, "id 'two' is not an integer"),
    ("1 10 5\n", 1, "expected 2 columns, got 3"),
])
def test_load_pairs_malformed(tmp_path, int_graphs, text, line, message):
    path = write(tmp_path, "p.txt", text)
    with raises("seeds", f"{path} line {line}:", message):
        load_pairs(path, *int_graphs, "seeds")


def test_load_pairs_missing_file(tmp_path, int_graphs):
    with raises(str(tmp_path / "p.txt"), "no such file"):
        load_pairs(tmp_path / "p.txt", *int_graphs, "seeds")


def test_load_id_list(tmp_path, int_graphs):
    _, target = int_graphs
    assert load_id_list(write(tmp_path, "c.txt", "id\n10\n# c\n30\n"),
                        target, "candidates").tolist() == [2, 0]
    path = write(tmp_path, "d.txt", "10\n20\n10\n")
    with raises("candidates", f"{path} line 3", "maps node 10 twice"):
        load_id_list(path, target, "candidates")
    path = write(tmp_path, "e.txt", "10\n40\n")
    with raises(f"{path} line 2", "id 40 is not a node"):
        load_id_list(path, target, "candidates")


# --- the DBP15k importer of the benchmarks (jobs/dbp15k.py), built on these loaders ---------


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


# --- real benchmark files ----------------------------------------------------------------------


@needs_data
def test_real_yeast():
    g = load_graph(DATA / "yeast_ppi" / "yeast0_Y2H1.txt")
    assert (g.num_nodes, g.num_edges) == (1004, 8323)
    assert sorted(g.ids.to_pylist()) == list(range(1004))
    leda = load_graph(DATA / "yeast_ppi" / "gw" / "0Krogan_2007_high.gw")
    assert (leda.num_nodes, leda.num_edges) == (1004, 8323)
    assert leda.ids[0].as_py() == "PAP1"


@needs_data
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


@needs_data
def test_real_dbp15k_raw_triples_are_named_from_their_uris():
    g = load_graph(DATA / "dbp15k" / "fr_en" / "triples_2")
    assert g.num_nodes == 19993 and g.names_from_ids
    assert all(g.names) and "Self Portrait (Bob Dylan album)" in g.names


# --- property ----------------------------------------------------------------------------------

TABLE_TEXT = st.text(alphabet="0123456789ab -.,\t\n#%enaif\r", max_size=200)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=200), TABLE_TEXT.map(str.encode)),
       suffix=st.sampled_from(["", ".csv", ".tsv", ".txt", ".gw"]))
def test_any_bytes_give_a_graph_or_input_error(tmp_path, data, suffix):
    path = tmp_path / f"g{suffix}"
    path.write_bytes(data)
    try:
        g = load_graph(path)
    except InputError as e:
        assert "\n" not in str(e) and str(path) in str(e)
    else:
        assert isinstance(g, Graph) and g.num_edges <= g.stats["input_edges"]


def test_row_groups_are_cut_into_shares_of_about_equal_rows_in_file_order():
    from tfgm_dist.load.shares import Share, cut
    groups = [("a", 0, 100), ("a", 1, 0), ("a", 2, 100), ("b", 0, 100), ("b", 1, 100),
              ("c", 0, 50)]
    assert cut(groups, 2) == [Share((("a", 0), ("a", 2), ("b", 0)), 0),
                              Share((("b", 1), ("c", 0)), 300)]
    assert cut(groups, 1) == [Share((("a", 0), ("a", 2), ("b", 0), ("b", 1), ("c", 0)), 0)]
    # more shares asked than row groups: one a group, none empty
    assert [s.offset for s in cut(groups, 10)] == [0, 100, 200, 300, 400]
    assert cut([("a", 0, 0)], 3) == []
