"""Supervised TFGMws: collection loading, the kNN label features, alignment and the CLI.

Real components: collections written to disk and read back, real FAISS searches checked
against a brute-force version of the paper's definition, the real yeast networks (skipped
when ../shared/data is absent) and ``cli.main`` writing real Parquet output.
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from tfgm_dist import cli
from tfgm_dist.config import from_dict, load_config
from tfgm_dist.embed import graph_operator
from tfgm_dist.errors import InputError
from tfgm_dist.graph import Graph
from tfgm_dist.load import load_graph
from tfgm_dist.pipeline import Pair, align, load_pair
from tfgm_dist.search import Candidates, build_index, search
from tfgm_dist.supervised import (Collection, align_supervised, collection_candidates,
                                  label_features, load_collection, per_graph)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
YEAST = DATA / "yeast_ppi"
needs_yeast = pytest.mark.skipif(not (YEAST / "yeast5_Y2H1.txt").is_file(),
                                 reason=f"yeast PPI benchmark not found under {YEAST}")

RING = [(0, 1), (1, 2), (2, 3), (3, 0), (0, 2)]


def write_edges(path: Path, edges, name=lambda v: f"n{v}") -> Path:
    path.write_text("".join(f"{name(u)}\t{name(v)}\n" for u, v in edges))
    return path


def write_labels(path: Path, rows) -> Path:
    path.write_text("".join(f"{node}\t{label}\n" for node, label in rows))
    return path


@pytest.fixture
def collection_dir(tmp_path: Path) -> Path:
    """Two edge-list graphs with label files and one Parquet-layout graph."""
    folder = tmp_path / "coll"
    folder.mkdir()
    write_edges(folder / "a.tsv", RING)
    write_labels(folder / "a.labels",
                 [("n0", "head"), ("n1", "tail"), ("n2", "wing"), ("n3", "beak")])
    write_edges(folder / "b.txt", RING[:4])
    write_labels(folder / "b.labels",
                 [("n3", "head"), ("n2", "tail"), ("n1", "wing"), ("n0", "eye")])
    (folder / "c").mkdir()
    pq.write_table(pa.table({"src": [10, 11], "dst": [11, 12]}), folder / "c" / "edges.parquet")
    pq.write_table(pa.table({"id": [10, 11, 12], "label": [7, 8, 9]}),
                   folder / "c" / "nodes.parquet")
    return folder


def test_load_collection_reads_files_and_parquet_layout(collection_dir):
    coll = load_collection(collection_dir)
    assert coll.names == ("a", "b", "c")
    assert coll.num_graphs == 3 and coll.graph.num_nodes == 11
    assert coll.member.tolist() == [0] * 4 + [1] * 4 + [2] * 3
    labels = [coll.labels[int(i)].as_py() for i in coll.label]
    ids = coll.graph.ids.to_pylist()
    by_id = dict(zip(ids, labels))
    assert by_id["a/n0"] == "head" and by_id["b/n3"] == "head" and by_id["b/n0"] == "eye"
    assert by_id["c/10"] == "7" and by_id["c/12"] == "9"  # Parquet int labels read as text
    assert coll.num_labels == 8  # head tail wing beak eye 7 8 9
    assert coll.graph.num_edges == 5 + 4 + 2
    shuffled = load_collection(collection_dir, seed=0)
    assert shuffled.graph.ids.to_pylist() != ids
    assert dict(zip(shuffled.graph.ids.to_pylist(),
                    [shuffled.labels[int(i)].as_py() for i in shuffled.label])) == by_id
    assert sorted(map(tuple, shuffled.graph.edge_index.T.tolist())) != sorted(
        map(tuple, coll.graph.edge_index.T.tolist()))


@pytest.mark.parametrize("change, message", [
    (lambda f: write_labels(f / "a.labels", [("n0", "x"), ("n1", "y"), ("n9", "z")]),
     r"^labels: .*a\.labels line 3: id 'n9' is not a node of .*a\.tsv$"),
    (lambda f: write_labels(f / "a.labels", [("n0", "x"), ("n1", "y"), ("n2", "w")]),
     r"^labels: .*a\.labels: node 'n3' of .*a\.tsv has no label"),
    (lambda f: write_labels(f / "a.labels", [("n0", "x"), ("n1", "y"), ("n2", "x"),
                                             ("n3", "z")]),
     r"^labels: .*a\.labels line 3: uses label 'x' twice \(also at line 1\)$"),
    (lambda f: write_labels(f / "a.labels", [("n0", "x"), ("n0", "y")]),
     r"^labels: .*a\.labels line 2: maps node 'n0' twice \(also at line 1\)$"),
    (lambda f: (f / "b.labels").unlink(),
     r"b\.txt: no label file b\.labels or b\.labels\.parquet beside it$"),
    (lambda f: write_labels(f / "zzz.labels", [("n0", "x")]),
     r"zzz\.labels: no graph file named zzz beside it$"),
    (lambda f: pq.write_table(pa.table({"id": [10, 11, 12]}), f / "c" / "nodes.parquet"),
     r"c/nodes\.parquet: missing column label; has id$"),
    (lambda f: pq.write_table(pa.table({"id": [10, 11, 12], "label": [1, None, 3]}),
                              f / "c" / "nodes.parquet"),
     r"c/nodes\.parquet row 2: column label is null$"),
    (lambda f: (f / "c" / "nodes.parquet").unlink(),
     r"c/nodes\.parquet: no such file; .* label column$"),
])
def test_bad_collections_name_the_file_and_line(collection_dir, change, message):
    change(collection_dir)
    with pytest.raises(InputError, match=message) as err:
        load_collection(collection_dir)
    assert "\n" not in str(err.value)


def test_empty_or_missing_collection(tmp_path):
    with pytest.raises(InputError, match="a collection is a folder"):
        load_collection(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no graph"):
        load_collection(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------
# The kNN step against a brute-force reading of the paper


def random_collection(rng: np.random.Generator, sizes: list[int], num_labels: int):
    graphs, labels = [], []
    for n in sizes:
        edges = torch.from_numpy(np.stack([np.arange(n - 1), np.arange(1, n)]))
        graphs.append(Graph(pa.array(np.arange(n)), edges))
        labels.append([str(x) for x in rng.choice(num_labels, n, replace=False)])
    return Collection.of(graphs, labels, [f"g{i}" for i in range(len(sizes))])


def brute_force_k(o: torch.Tensor, o_c: torch.Tensor, coll: Collection, k: int) -> torch.Tensor:
    """Dense similarities; per graph its best node; the k best graphs; sum of one-hots."""
    sim = o @ o_c.T
    out = torch.zeros(o.size(0), coll.num_labels)
    for i in range(o.size(0)):
        best = []
        for g in range(coll.num_graphs):
            nodes = torch.nonzero(coll.member == g).squeeze(1)
            j = nodes[sim[i, nodes].argmax()]
            best.append((float(sim[i, j]), int(j)))
        for _, j in sorted(best, reverse=True)[:k]:
            out[i, coll.label[j]] += 1
    return out


def test_wide_label_histograms_are_projected_not_made_dense(monkeypatch, caplog):
    """Past LABEL_CELLS the histograms are matched through a random projection; the same
    pairs still match (a node's own histogram is its nearest)."""
    from tfgm_dist import supervised
    n, labels = 30, 500
    rng = np.random.default_rng(0)
    at = torch.from_numpy(np.stack([np.repeat(np.arange(n), 3), rng.integers(0, labels, 3 * n)]))
    x = torch.sparse_coo_tensor(at, torch.ones(3 * n), (n, labels)).coalesce()
    nodes = np.arange(n)
    ring = Graph(pa.array(nodes), torch.from_numpy(np.stack([nodes, (nodes + 1) % n])))
    pair = Pair(ring, ring, gold=(np.arange(n), np.arange(n)))
    monkeypatch.setattr(supervised, "LABEL_CELLS", 1)
    caplog.set_level(logging.INFO, logger="tfgm_dist")
    result = supervised.match_vectors(pair, x, x, from_dict({}))
    assert "500 labels projected to 256" in caplog.text
    assert result.metrics["accuracy"] == 1.0


@pytest.mark.parametrize("k", [1, 3, 6])
def test_label_features_equal_the_papers_definition(k):
    rng = np.random.default_rng(k)
    coll = random_collection(rng, [7, 4, 9, 5, 6, 3], num_labels=12)
    o_c = torch.nn.functional.normalize(torch.randn(coll.graph.num_nodes, 8), dim=1)
    o = torch.nn.functional.normalize(torch.randn(20, 8), dim=1)
    # search.k = 2 forces the widening: two hits rarely span k distinct graphs
    cfg = from_dict({"search": {"k": 2}, "supervised": {"k": k}})
    nearest = partial(search, build_index(o_c.numpy()))
    ring = graph_operator(torch.tensor([[0], [1]]), 20)
    op_c = graph_operator(coll.graph.edge_index, coll.graph.num_nodes)
    got = label_features(o, ring, nearest, coll, op_c, cfg)
    assert got.is_sparse and got._nnz() <= 20 * k  # never a dense [n, #labels] histogram
    assert torch.equal(got.to_dense(), brute_force_k(o, o_c, coll, k))
    assert torch.equal(got.to_dense().sum(1), torch.full((20,), float(k)))


def test_collection_candidates_widen_only_short_rows():
    """Row 0 sees only graph 0 in its first 16 hits; row 1 sees all three graphs at once."""
    member = torch.tensor([0] * 10 + [1] * 10 + [2])
    o_c = torch.eye(21)
    queries = torch.stack([o_c[:10].sum(0), o_c[0] + o_c[10] + o_c[20]])
    calls = []

    def nearest(q, w):
        calls.append((len(q), w))
        return search(build_index(o_c.numpy()), q, w)

    c = collection_candidates(queries, nearest, member, 3, k=3, width=4)
    assert calls == [(2, 4), (1, 8), (1, 16), (1, 21)]
    assert {int(member[j]) for j in c.index[0]} == {0, 1, 2}
    assert c.index[1, :3].tolist() == [0, 10, 20] and (c.index[1, 4:] == -1).all()


def test_per_graph_splits_lists_in_rank_order():
    member = torch.tensor([0, 0, 1, 1, 1])
    c = Candidates(torch.tensor([[0.9, 0.8, 0.7, 0.1], [0.5, 0.4, -torch.inf, -torch.inf]]),
                   torch.tensor([[2, 0, 4, 1], [1, 3, -1, -1]]))
    g = per_graph(c, member, 2)  # rows: g0/i0, g0/i1, g1/i0, g1/i1
    assert g.index.tolist() == [[0, 1], [1, -1], [2, 4], [3, -1]]
    assert g.scores[0].tolist() == pytest.approx([0.8, 0.1])


# ---------------------------------------------------------------------------------------------
# Alignment on the real yeast networks

YEAST_CONFIG = {
    "features": {"kind": "degree-sinusoidal", "sinusoidal_dim": 128},
    "embed": {"layers": 10, "self_loops": False, "include_input": False, "bias": 2.0},
    "search": {"k": 50},
    "refine": {"enabled": True, "steps": 20, "dim": 64, "include_input": False},
    "assign": {"method": "one-to-one", "one_to_one": "hungarian"},
    "supervised": {"k": 1, "match": "one-to-one"},
}


@needs_yeast
def test_supervised_beats_unsupervised_on_yeast():
    """yeast5 -> yeast25 through yeast0 and yeast20 (each renumbered): labels help a lot."""
    cfg = from_dict(YEAST_CONFIG)
    graphs = []
    for p, s in ((0, 1), (20, 2)):
        g = load_graph(YEAST / f"yeast{p}_Y2H1.txt")
        graphs.append(g.permuted(torch.randperm(g.num_nodes,
                                                generator=torch.Generator().manual_seed(s))))
    coll = Collection.of(graphs, [g.ids.cast(pa.string()).to_pylist() for g in graphs],
                         ["yeast0", "yeast20"])
    source = load_graph(YEAST / "yeast5_Y2H1.txt")
    pair = load_pair(source, YEAST / "yeast25_Y2H1.txt", cfg)
    pair = Pair(pair.source, pair.target,
                gold=tuple(g.index_of(source.ids, "gold") for g in (pair.source, pair.target)))
    unsupervised = align(pair, cfg).metrics["accuracy"]
    supervised = align_supervised(pair, coll, cfg).metrics["accuracy"]
    assert supervised > unsupervised + 0.1, (supervised, unsupervised)  # measured 0.727 vs 0.536


@needs_yeast
def test_shipped_config_loads():
    cfg = load_config(Path(__file__).resolve().parents[1] / "jobs" / "configs"
                      / "supervised-yeast.toml")
    assert cfg.supervised.k == 1 and cfg.supervised.match == "one-to-one"


def test_config_section_is_validated(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('[supervised]\nmatch = "mutual"\n')
    with pytest.raises(InputError, match=r"bad\.toml: supervised\.match = 'mutual' is not one"):
        load_config(path)
    path.write_text("[supervised]\nk = 0\n")
    with pytest.raises(InputError, match=r"supervised\.k = 0 is out of range"):
        load_config(path)


# ---------------------------------------------------------------------------------------------
# The command line


@pytest.fixture
def labelled_task(tmp_path: Path) -> dict[str, Path]:
    """A collection of three relabelled copies of one random graph, and a pair of copies with
    string ids whose gold is known: structure alone identifies most nodes."""
    rng = np.random.default_rng(0)
    n = 60
    edges = {tuple(sorted(e)) for e in rng.integers(0, n, (120, 2)) if e[0] != e[1]}
    edges = sorted(edges | {(v, v + 1) for v in range(n - 1)})  # a path: every node has an edge
    folder = tmp_path / "coll"
    folder.mkdir()
    for g in range(3):
        perm = rng.permutation(n)  # node v of the template is node perm[v] of graph g
        write_edges(folder / f"g{g}.tsv", edges, name=lambda v: f"v{perm[v]}")
        write_labels(folder / f"g{g}.labels", [(f"v{perm[v]}", f"part{v}") for v in range(n)])
    perm = rng.permutation(n)
    write_edges(tmp_path / "source.tsv", edges, name=lambda v: f"s{v}")
    write_edges(tmp_path / "target.tsv", edges, name=lambda v: f"t{perm[v]}")
    write_labels(tmp_path / "gold.tsv", [(f"s{v}", f"t{perm[v]}") for v in range(n)])
    return {"collection": folder, "source": tmp_path / "source.tsv",
            "target": tmp_path / "target.tsv", "gold": tmp_path / "gold.tsv"}


def test_cli_align_supervised_writes_matches(labelled_task, tmp_path):
    t, out = labelled_task, tmp_path / "out"
    config = tmp_path / "cfg.toml"
    config.write_text('[features]\nkind = "degree-onehot"\n[supervised]\nk = 2\n')
    code = cli.main(["-q", "align-supervised", str(t["collection"]), str(t["source"]),
                     str(t["target"]), "--out", str(out), "--gold", str(t["gold"]),
                     "--config", str(config)])
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["collection"] == {"graphs": 3, "nodes": 180, "labels": 60}
    assert metrics["accuracy"] > 0.5 and "knn" in metrics["seconds"]
    table = pq.read_table(out / "matches" / "part-00000.parquet")
    assert table.num_rows == 60 and set(table.column("source_id").to_pylist()) == {
        f"s{v}" for v in range(60)}
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["supervised"]["k"] == 2 and "collection" in manifest["inputs"]


@pytest.mark.slow
def test_align_supervised_killed_in_the_write_stage_resumes_like_align(labelled_task, tmp_path):
    t = labelled_task
    args = [sys.executable, "-m", "tfgm_dist.cli", "-q", "align-supervised", str(t["collection"]),
            str(t["source"]), str(t["target"]), "--gold", str(t["gold"])]
    calm = subprocess.run([*args, "--out", str(tmp_path / "calm")], capture_output=True)
    assert calm.returncode == 0, calm.stderr
    out = tmp_path / "lake" / "run"
    out.parent.mkdir()
    killed = subprocess.run([*args, "--out", str(out)], capture_output=True,
                            env={**os.environ, "TFGM_FAILPOINT": "write"})
    assert killed.returncode == -9 and not out.exists()
    rerun = subprocess.run([*args, "--out", str(out)], capture_output=True)
    assert rerun.returncode == 0, rerun.stderr
    metrics = json.loads((out / "metrics.json").read_text())
    assert "resume" in metrics["seconds"] and "knn" not in metrics["seconds"]
    assert metrics["collection"] == {"graphs": 3, "nodes": 180, "labels": 60}
    assert pq.read_table(out / "matches").equals(pq.read_table(tmp_path / "calm" / "matches"))
    assert sorted(p.name for p in out.parent.iterdir()) == ["run"]


def test_cli_bad_label_file_exits_2_and_writes_nothing(labelled_task, tmp_path, capsys):
    t, out = labelled_task, tmp_path / "out"
    labels = t["collection"] / "g1.labels"
    labels.write_text(labels.read_text() + "nobody\tpart0\n")
    code = cli.main(["-q", "align-supervised", str(t["collection"]), str(t["source"]),
                     str(t["target"]), "--out", str(out)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not out.exists()
    assert err.startswith("error: labels: ") and "g1.labels line 61: id 'nobody'" in err
    assert "\n" not in err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]


def test_the_knn_sharded_over_ray_actors_gives_the_same_matches(
        cluster, labelled_task, tmp_path):
    """``--partitions 3``: the labelled nodes in three FAISS shards on a real local Ray
    cluster; the merged top-k equals one index's, so the rows are the same."""
    from tfgm_dist.distributed import ShardedIndex
    t = labelled_task
    config = tmp_path / "cfg.toml"
    config.write_text('[features]\nkind = "degree-onehot"\n[supervised]\nk = 2\n')
    x = np.random.default_rng(1).standard_normal((500, 16)).astype(np.float32)
    for options in ({"kind": "flat"}, {"kind": "ivf", "nlist": None, "nprobe": 3, "seed": 0}):
        sharded = ShardedIndex(x, 3, options)  # IVF: the shards copy one trained index
        got = sharded(x[:40], 7)
        sharded.close()
        want = search(build_index(x, **options), x[:40], 7)
        assert torch.equal(got.index, want.index) and torch.equal(got.scores, want.scores)
    for name, extra in (("one", []), ("ray", ["--partitions", "3"])):
        assert cli.main(["-q", "align-supervised", str(t["collection"]), str(t["source"]),
                         str(t["target"]), "--out", str(tmp_path / name), "--gold",
                         str(t["gold"]), "--config", str(config), *extra]) == 0
    one, on_ray = (pq.read_table(tmp_path / name / "matches").replace_schema_metadata(None)
                   for name in ("one", "ray"))
    assert one.num_rows == 60 and one.equals(on_ray)
