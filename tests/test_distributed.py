"""The Ray pipeline on a real local cluster: the same rows as one process, for any P, and
after an actor is killed mid-embedding, in the refinement or in the one-to-one auction."""
import gc
import json
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import ray
import torch

from tfgm_dist.config import Config, load_config, with_overrides
from tfgm_dist.distributed import RESTART_HEADROOM, placement
from tfgm_dist.distributed.cluster import fitted_memory, node_memory, placed
from tfgm_dist.distributed.actors import Usage, whole_graph
from tfgm_dist.distributed.halo import halo_plans
from tfgm_dist.embed import graph_operator, role_partial, row_block
from tfgm_dist.errors import InputError
from tfgm_dist.graph import Graph
from tfgm_dist.job import OnRay, run_job
from tfgm_dist.load import shares
from tfgm_dist.load.tables import NodeContent
from tfgm_dist.partition import partition, pymetis
from tfgm_dist.pipeline import load_pair
from tfgm_dist.synth import write_pair

ROOT = Path(__file__).resolve().parents[1]
YEAST = ROOT.parent / "shared" / "data" / "yeast_ppi"


def rows(out: Path):
    """The written dataset in a canonical order, and its manifest."""
    table = ds.dataset(out / "matches", format="parquet").to_table()
    table = table.replace_schema_metadata(None)
    return (table.sort_by([("source_id", "ascending"), ("rank", "ascending")]),
            json.loads((out / "manifest.json").read_text()))


def job(cfg: Config, out: Path, partitions: int, **paths) -> Config:
    return with_overrides(cfg, **{"job.out": str(out), "ray.partitions": partitions,
                                  **{f"job.{k}": str(v) for k, v in paths.items()}})


def assert_equal_matches(ta: pa.Table, tb: pa.Table) -> None:
    """A Ray run's rows are one process's: bit for bit where the part actors run on CPUs;
    where they run on the cluster's GPU, every id, rank and null equal and the floats to
    1e-6, since a GPU sums a part's rows in another order than the whole graph's (on an
    H100: scores within 4.8e-7 of one process's, every target, confidence and accuracy
    equal)."""
    assert ta.num_rows > 0
    if not ray.cluster_resources().get("GPU"):
        assert ta.equals(tb)
        return
    assert ta.schema == tb.schema and ta.num_rows == tb.num_rows
    for name in ta.column_names:
        a, b = ta.column(name), tb.column(name)
        if pa.types.is_floating(a.type):
            assert a.null_count == b.null_count, name
            np.testing.assert_allclose(a.to_numpy(zero_copy_only=False),
                                       b.to_numpy(zero_copy_only=False), rtol=0, atol=1e-6,
                                       err_msg=name)
        else:
            assert a.equals(b), name


def assert_same_rows(a: Path, b: Path) -> None:
    (ta, _), (tb, _) = rows(a), rows(b)
    assert ta.num_rows == tb.num_rows > 0
    for name in ("source_id", "target_id", "rank"):
        assert ta.column(name).equals(tb.column(name)), name
    np.testing.assert_allclose(ta.column("score").to_numpy(), tb.column("score").to_numpy(),
                               rtol=1e-5, atol=1e-5)


def test_partition_covers_every_node_once_in_non_empty_parts():
    src, dst = torch.randint(0, 500, (2, 3000))
    for method in ("metis", "rcm") if pymetis else ("rcm",):
        pt = partition(torch.stack([src, dst]), 500, 3, method=method)
        assert np.bincount(pt.part, minlength=3).min() > 0
        for p in range(3):
            nodes = pt.nodes(p)
            assert (pt.position[nodes] == np.arange(nodes.size)).all()
        assert pt.cut_edges(torch.stack([src, dst])) < 3000


@pytest.mark.parametrize("operator", ["sum", "mean", "gcn"])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("parts", [1, 3])
def test_each_part_builds_its_rows_and_receives_exactly_its_halo_rows(parts, self_loops,
                                                                      operator):
    """A part's rows of the operator, built from the edges that touch it, are those cut from
    the whole graph's operator, bit for bit (weighted, with repeated and reversed edges and
    a given self-loop); a part receives from the others exactly the rows of its halo, and
    its rows renumbered to them as received give the same products, bit for bit."""
    n = 400
    gen = torch.Generator().manual_seed(4)
    edges = torch.randint(0, n, (2, 1600), generator=gen)
    edges = torch.cat([edges, edges[:, :50].flip(0), torch.tensor([[7], [7]])], 1)
    weight = torch.rand(edges.size(1), generator=gen)
    op = graph_operator(edges, n, operator, self_loops=self_loops, edge_weight=weight)
    x = torch.randn(n, 5, generator=gen)
    parting = partition(edges, n, parts, seed=0)
    plan = halo_plans(edges, n, parting, operator, self_loops, weight)
    sent = 0
    for p, gp in enumerate(plan):
        built, cut = gp.block(), row_block(op, torch.from_numpy(parting.nodes(p)))
        assert torch.equal(built.halo, cut.halo) and torch.equal(built.nodes, cut.nodes)
        for a, b in zip((built.adj.crow_indices(), built.adj.col_indices(), built.adj.values()),
                        (cut.adj.crow_indices(), cut.adj.col_indices(), cut.adj.values())):
            assert torch.equal(a, b)
        own = x[parting.nodes(p)].numpy()
        slices = [plan[q].sends[plan[q].consumers.index(p)] for q in gp.needs]
        received = [x[parting.nodes(q)].numpy()[r] for q, r in zip(gp.needs, slices)]
        stack = np.concatenate([own, *received])
        np.testing.assert_array_equal(stack[gp.gather], x[gp.halo].numpy())  # the halo, in order
        stacked = gp.stacked(built)  # its columns the rows as received: the same sums
        np.testing.assert_array_equal(stacked.halo.numpy()[gp.gather], gp.halo)
        assert torch.equal(stacked.adj @ torch.from_numpy(stack), cut.adj @ x[cut.halo])
        outside = int((parting.part[gp.halo] != p).sum())
        assert sum(r.size for r in slices) == outside  # only halo rows cross, never more
        assert gp.edges.size(1) < edges.size(1) or parts == 1  # only the edges that touch it
        sent += outside
    assert (sent == 0) == (parts == 1)


@pytest.mark.parametrize("operator", ["sum", "mean", "gcn"])
@pytest.mark.parametrize("self_loops", [True, False])
@pytest.mark.parametrize("parts", [1, 3])
def test_the_parts_rows_with_relation_roles_add_up_to_the_whole_operators(parts, self_loops,
                                                                          operator):
    """With a knowledge graph's relation roles as nodes after the graph's: a part's rows of
    the operator over edges and roles, times the rows it receives and every role's row, are
    the whole operator's rows; the parts' shares of the roles' rows, summed, with the roles'
    self-loops added once, are the whole operator's role rows."""
    n, num_roles = 300, 8
    gen = torch.Generator().manual_seed(5)
    edges = torch.randint(0, n, (2, 1200), generator=gen)
    weight = torch.rand(edges.size(1), generator=gen)
    roles = torch.stack([edges[0], 2 * (edges[0] % 4)])  # heads of 4 relations
    roles = torch.cat([roles, torch.stack([edges[1], 2 * (edges[1] % 4) + 1])], 1)  # tails
    whole = graph_operator(torch.cat([edges, torch.stack([roles[0], n + roles[1]])], 1),
                           n + num_roles, operator, self_loops=self_loops,
                           edge_weight=torch.cat([weight, torch.ones(roles.size(1))]))
    cut = row_block(whole, torch.arange(n + num_roles))
    h = torch.randn(n + num_roles, 6, dtype=torch.float64, generator=gen)
    expected = cut.adj.to(torch.float64) @ h
    parting = partition(edges, n, parts, seed=0)
    plan = halo_plans(edges, n, parting, operator, self_loops, weight, roles)
    partials = []
    for p, gp in enumerate(plan):
        rows, share = gp.role_blocks()
        own = h[parting.nodes(p)]
        slices = [plan[q].sends[plan[q].consumers.index(p)] for q in gp.needs]
        stack = torch.cat([own, *[h[parting.nodes(q)][r] for q, r in zip(gp.needs, slices)],
                           h[n:]])
        torch.testing.assert_close(rows.adj.to(torch.float64) @ stack,
                                   expected[parting.nodes(p)])
        partials.append(role_partial(share, own, h[n:] if p == 0 else None))
    torch.testing.assert_close(sum(partials), expected[n:])


def _edge_set(edges: torch.Tensor, weights: torch.Tensor | None) -> list[tuple]:
    """A graph's edges (and weights) in a canonical order: the order a load leaves them in
    is not read by any stage."""
    rows = edges.T.tolist() if weights is None else [
        (*e, w) for e, w in zip(edges.T.tolist(), weights.tolist())]
    return sorted(map(tuple, rows))


@pytest.mark.parametrize("layout", [
    "parquet", "part files",  # the numbering by nodes.parquet's ids, and by the ids met:
    pytest.param("no nodes", marks=pytest.mark.slow),  # the driver's step the others take
    pytest.param("triples", marks=pytest.mark.slow)])  # one task, as yeast on Ray below
def test_a_ray_run_s_graphs_are_loaded_by_workers_and_read_back_as_one_process_s(
        cluster, tmp_path, layout):
    """The driver of a Ray run holds no edges: a Parquet layout is read by a worker per share
    of its row groups, numbered, and cut into blocks by other workers (a single file of row
    groups, its edges a folder of part files as Spark writes them with weights and
    relations, edges without ``nodes.parquet``), a text file by one task (knowledge-graph
    triples with relation roles); the driver keeps the ids and the counts. The blocks read
    back are one process's load: the same ids in the same order, the same edges, the first
    of repeated edges in file order with its weight, the same roles, self-loops and counts,
    though the repeats and loops fall in different shares."""
    paths = write_pair(tmp_path, 300, seed=1)
    rng = np.random.default_rng(0)
    for name in ("source", "target"):
        if layout == "triples":
            break
        edges = pq.read_table(paths[name] / "edges.parquet")
        # repeats of earlier rows and self-loops, in later row groups / files
        again = edges.take(rng.integers(0, edges.num_rows, 150))
        loops = pa.table({"src": edges["src"][:20], "dst": edges["src"][:20]})
        edges = pa.concat_tables([edges, again, loops.cast(edges.schema)])
        (paths[name] / "edges.parquet").unlink()
        if layout == "no nodes":
            (paths[name] / "nodes.parquet").unlink()
        if layout == "part files":
            edges = edges.append_column("weight", pa.array(rng.uniform(0.5, 2, edges.num_rows),
                                                           pa.float32()))
            edges = edges.append_column("relation", pa.array(
                rng.choice(["knows", "likes", "cites"], edges.num_rows)))
            folder = paths[name] / "edges.parquet"
            folder.mkdir()
            for i, at in enumerate(range(0, edges.num_rows, 300)):
                pq.write_table(edges.slice(at, 300), folder / f"part-{i:05d}.parquet")
        else:
            pq.write_table(edges, paths[name] / "edges.parquet", row_group_size=150)
    if layout == "triples":
        for name, rows in (("source", ["a\tq\tb", "b\tr\tc", "c\tq\ta", "d\tr\ta"]),
                           ("target", ["x\tq\ty", "y\tr\tz", "z\tq\tx", "w\tq\tz"])):
            paths[name] = tmp_path / f"{name}.triples"
            paths[name].write_text("\n".join(rows) + "\n")
    cfg = from_toml("[ray]\npartitions = 3")
    here = load_pair(paths["source"], paths["target"], cfg)
    runner = OnRay()
    there = load_pair(paths["source"], paths["target"], cfg, loaded=runner.loaded(cfg))
    roles = [u["role"] for u in runner.usage]
    if layout == "triples":
        assert roles == ["load source", "load target"]
    else:  # a share a file or about 1 / 3 of the row groups, a block a part
        assert {r.rsplit(" ", 1)[0] for r in roles} == {
            f"load {g} {kind}" for g in ("source", "target") for kind in ("share", "block")}
        assert sum("source share" in r for r in roles) == 3
    for a, b in ((here.source, there.source), (here.target, there.target)):
        assert b.edge_index.numel() == 0 and b.edge_weight is None and b.roles is None
        assert (b.num_nodes, b.num_edges, b.num_roles, b.stats) == (a.num_nodes, a.num_edges,
                                                                     a.num_roles, a.stats)
        if layout != "triples":
            assert a.stats["duplicate_edges"] >= 100 and a.stats["self_loops"] == 20
        assert a.ids.equals(b.ids)  # the same numbering, the target's drawn order too
        read = whole_graph(b).with_content()
        assert _edge_set(read.edge_index, read.edge_weight) == _edge_set(a.edge_index,
                                                                           a.edge_weight)
        assert (read.roles is None) == (a.roles is None)
        if a.roles is not None:
            assert _edge_set(read.roles, None) == _edge_set(a.roles, None)
        assert (read.features is None and a.features is None) or torch.equal(read.features,
                                                                              a.features)
        assert read.names == a.names and read.names_from_ids == a.names_from_ids
    assert (there.source.num_roles > 0) == (layout in ("triples", "part files"))
    assert (here.source.edge_weight is not None) == (layout == "part files")


def _edge_list(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("ids", ["integers", "strings"])
def test_a_large_edge_list_is_read_in_byte_ranges_as_one_process_reads_it(
        cluster, tmp_path, monkeypatch, ids):
    """An edge list of at least two ranges' bytes is read by a worker per range, each
    starting at a line and told its first line's number: a header, comments and blank lines,
    weights, repeated edges and self-loops in later ranges, integer ids or strings; the
    blocks read back are one process's load."""
    monkeypatch.setattr(shares, "TEXT_SHARE_BYTES", 1 << 12)  # the plan is the driver's
    rng = np.random.default_rng(2)
    name = (lambda v: str(v)) if ids == "integers" else (lambda v: f"user{v:04d}")
    paths = {}
    for g in ("source", "target"):
        src, dst = rng.integers(0, 400, 3000), rng.integers(0, 400, 3000)
        rows = [f"{name(a)}\t{name(b)}\t{rng.uniform(0.5, 2):.3f}" for a, b in zip(src, dst)]
        rows += rows[:50] + [f"{name(v)}\t{name(v)}\t1" for v in range(20)]
        rows[700:700] = ["", "# a comment", "% another"]
        paths[g] = _edge_list(tmp_path / f"{g}.tsv", ["src\tdst\tweight", *rows])
    cfg = from_toml("[ray]\npartitions = 3")
    here = load_pair(paths["source"], paths["target"], cfg)
    runner = OnRay()
    there = load_pair(paths["source"], paths["target"], cfg, loaded=runner.loaded(cfg))
    assert sum("load source share" in u["role"] for u in runner.usage) == 3
    for a, b in ((here.source, there.source), (here.target, there.target)):
        assert a.ids.type == (pa.int64() if ids == "integers" else pa.string())
        assert a.ids.equals(b.ids) and a.stats == b.stats
        assert a.stats["duplicate_edges"] >= 50 and a.stats["self_loops"] >= 20
        read = whole_graph(b).with_content()
        assert _edge_set(read.edge_index, read.edge_weight) == _edge_set(a.edge_index,
                                                                           a.edge_weight)


def test_an_edge_list_is_read_whole_where_its_ranges_would_not_tell_what_one_process_does(
        tmp_path, monkeypatch):
    """Byte ranges start at a line; one task reads a file too small for two ranges, a
    compressed one, and one whose first line is spelled like a column name (only the whole
    file tells whether its ids recur below it)."""
    import gzip
    monkeypatch.setattr(shares, "TEXT_SHARE_BYTES", 1 << 12)
    rows = [f"{a} {a + 1}" for a in range(3000)]
    plan = shares.text_plan(_edge_list(tmp_path / "g.txt", rows), 3)
    text = (tmp_path / "g.txt").read_bytes()
    assert len(plan.ranges) == 3 and plan.ranges[0][0] == 0 and plan.ranges[-1][1] == len(text)
    assert all(text[a - 1:a] == b"\n" for a, _ in plan.ranges[1:])
    assert (plan.header, plan.like) == (False, (2, 1))
    assert shares.text_plan(_edge_list(tmp_path / "small.txt", rows[:100]), 3) is None
    (tmp_path / "g.txt.gz").write_bytes(gzip.compress(text))
    assert shares.text_plan(tmp_path / "g.txt.gz", 3) is None
    named = [f"u{a} u{a + 1}" for a in range(3000)]
    assert shares.text_plan(_edge_list(tmp_path / "h.txt", ["node_a node_b", *named]), 3) is None
    assert shares.text_plan(_edge_list(tmp_path / "n.txt", ["node_a node_b", *rows]), 3).header
    assert shares.text_plan(_edge_list(tmp_path / "s.txt", ["source target", *rows]), 3).like \
        == (2, 2)


def test_a_bad_line_in_a_later_byte_range_is_named_as_one_process_names_it(
        cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(shares, "TEXT_SHARE_BYTES", 1 << 12)
    rows = [f"{a} {a + 1}" for a in range(3000)]
    good = _edge_list(tmp_path / "good.txt", rows)
    cfg = from_toml("[ray]\npartitions = 3")
    for bad_row, said in (("7 8 9 10", "expected 2 columns like line 1, got 4"),
                          ("7 8 x", "expected 2 columns like line 1, got 3")):
        bad = _edge_list(tmp_path / "bad.txt", rows[:2500] + [bad_row] + rows[2500:])
        with pytest.raises(InputError) as one:
            load_pair(good, bad, cfg)
        with pytest.raises(InputError) as there:
            load_pair(good, bad, cfg, loaded=OnRay().loaded(cfg))
        assert str(there.value) == str(one.value) and f"line 2501: {said}" in str(one.value)


def test_a_bad_input_loaded_by_a_worker_is_one_error(cluster, tmp_path):
    """A malformed input found by the task that loads it is the loader's one-line error."""
    good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
    good.write_text("1\t2\n2\t3\n")
    bad.write_text("1\t2\n3\n")
    with pytest.raises(InputError, match=r"bad.tsv.*line 2"):
        OnRay().loaded(Config())(good, bad)


def test_a_bad_row_in_a_later_share_is_named_as_one_process_names_it(cluster, tmp_path):
    """The workers that read and number a Parquet layout's shares name a bad row by its row
    of the whole file, as one process's load does."""
    paths = write_pair(tmp_path, 300, seed=1)
    edges = pq.read_table(paths["target"] / "edges.parquet")
    src = edges["src"].to_pylist()
    src[900] = "no such node"  # an id nodes.parquet does not list
    edges = edges.set_column(0, "src", pa.array(src, edges.schema.field("src").type))
    pq.write_table(edges, paths["target"] / "edges.parquet", row_group_size=150)
    cfg = from_toml("[ray]\npartitions = 3")
    with pytest.raises(InputError) as one:
        load_pair(paths["source"], paths["target"], cfg)
    with pytest.raises(InputError) as there:
        load_pair(paths["source"], paths["target"], cfg, loaded=OnRay().loaded(cfg))
    assert str(there.value) == str(one.value)
    assert "row 901" in str(one.value) and "not listed" in str(one.value)


def test_a_layout_of_self_loops_alone_is_the_error_one_process_gives(cluster, tmp_path):
    """The shares' tasks count the self-loops; a graph of nothing else is refused with the
    message of one process's load."""
    paths = write_pair(tmp_path, 300, seed=1)
    ids = pq.read_table(paths["target"] / "nodes.parquet")["id"]
    pq.write_table(pa.table({"src": ids, "dst": ids}), paths["target"] / "edges.parquet")
    cfg = from_toml("[ray]\npartitions = 2")
    with pytest.raises(InputError) as one:
        load_pair(paths["source"], paths["target"], cfg)
    with pytest.raises(InputError) as there:
        load_pair(paths["source"], paths["target"], cfg, loaded=OnRay().loaded(cfg))
    assert str(there.value) == str(one.value) and "every edge is a self-loop" in str(one.value)


def test_one_actor_per_gpu_with_its_tensors_on_cuda():
    device, threads, options = placement(16, 4, 4)
    assert device == "cuda" and threads == 4
    assert options["num_gpus"] == 1 and options["num_cpus"] == 0
    assert placement(16, 4, 8)[2]["num_gpus"] == 0.5  # two parts share each GPU


def test_cpu_actors_run_their_share_of_cores_and_reserve_half():
    device, threads, options = placement(8, 0, 2)
    assert device == "cpu" and threads == 4
    assert options["num_cpus"] == 4 * RESTART_HEADROOM and "num_gpus" not in options
    assert options["scheduling_strategy"] == "SPREAD"


def test_actors_declare_no_more_memory_than_lets_every_one_be_placed_at_once():
    assert fitted_memory(3, 3, [10, 4]) == 3  # three fit on the first node
    assert fitted_memory(5, 3, [10, 4]) == 4  # two of 4 on the first, one on the second
    assert fitted_memory(12, 1, [10, 4]) == 10
    # how many the nodes hold at the estimate: as many compute a layer at once
    assert placed(5, [10, 4]) == 2 and placed(3, [10, 4]) == 4 and placed(12, [10, 4]) == 0


@pytest.mark.parametrize("seeded", [False, True])
def test_a_finished_job_leaves_nothing_in_the_object_store(cluster, tmp_path, seeded):
    """A long-lived runner (the API in a service) runs job after job on one cluster. The
    streaming partition task, and with seeds the tasks of the held-out passes and the
    anchored inputs, took whole graphs as arguments, large enough (their ids) to go
    through the object store, and the references of the blocks inside them stayed counted
    there after the job: 8-12 objects a job at P = 2, the blocks' edges, weights and
    roles."""
    from ray._private.internal_api import memory_summary  # the only count of the store
    data = write_pair(tmp_path / "data", 12000, seed=5)
    paths = dict(source=data["source"], target=data["target"])
    if seeded:
        paths["seeds"] = tmp_path / "seeds.parquet"
        pq.write_table(pq.read_table(data["gold"]).slice(0, 1200), paths["seeds"])
    run_job(job(from_toml("[bootstrap]\nrounds = 0"), tmp_path / "out", 2, **paths))
    gc.collect()
    deadline = time.monotonic() + 20  # the store lets go of a job's objects as it hears
    while "usage 0 MiB, 0 objects" not in (summary := memory_summary(stats_only=True)):
        assert time.monotonic() < deadline, summary
        time.sleep(0.5)


def test_part_actors_sized_beyond_the_node_all_start(cluster):
    """The 3M pair at P = 4 declared more than a quarter of this machine each and hung with
    two of its four actors started; declared as fitted, every one starts."""
    nodes = node_memory()
    memory = fitted_memory(int(max(nodes)), 3, nodes)
    assert 0 < memory <= max(nodes) / 3

    @ray.remote(num_cpus=0)
    class Sized:
        def ready(self) -> bool:
            return True

    actors = [Sized.options(memory=memory).remote() for _ in range(3)]
    assert ray.get([a.ready.remote() for a in actors], timeout=60) == [True] * 3


def test_part_actors_the_nodes_cannot_hold_at_their_estimate_embed_a_layer_at_a_time(
        cluster, tmp_path, monkeypatch, caplog):
    """Where the nodes cannot place every part actor at its estimate (the 3M pair at P = 4
    here), the run says so and computes as many layers at once as fit, here one, each
    letting its stacked rows go (four at once had Ray's memory monitor kill them), with
    the rows of a run that computes them together."""
    import tfgm_dist.distributed as distributed
    data = write_pair(tmp_path / "data", 3000, seed=5)
    paths = dict(source=data["source"], target=data["target"])
    base = from_toml("[bootstrap]\nrounds = 0")
    run_job(job(base, tmp_path / "together", 3, **paths))
    monkeypatch.setattr(distributed, "node_memory", lambda: [float(64 << 20)])
    with caplog.at_level("WARNING"):
        run_job(job(base, tmp_path / "apart", 3, **paths))
    assert "can hold 3 at once of at most 0.0 GiB" in caplog.text
    assert_same_rows(tmp_path / "together", tmp_path / "apart")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU; torch sees none on this host")
def test_a_ray_run_on_the_gpu_equals_one_process_on_the_cpu(cluster, tmp_path):
    """The part actor's tensors live on the GPU (with faiss-cpu its exact search is torch's
    there); its matches are one CPU process's."""
    data = write_pair(tmp_path / "data", 3000, seed=2)
    cfg = with_overrides(load_config(None), **{"search.k": 10, "job.source": str(data["source"]),
                                               "job.target": str(data["target"]),
                                               "job.gold": str(data["gold"])})
    single = run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "single"),
                                            "device": "cpu"}))
    on_gpu = run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "gpu"),
                                            "ray.partitions": 1}))
    assert on_gpu["ray"]["device"] == "cuda"
    assert on_gpu["accuracy"] == pytest.approx(single["accuracy"], abs=0.001)


def test_partition_refuses_more_parts_than_nodes():
    with pytest.raises(InputError, match="partitions = 4 exceeds the graph's 3 nodes"):
        partition(torch.tensor([[0, 1], [1, 2]]), 3, 4)


@pytest.mark.skipif(not YEAST.exists(), reason=f"benchmark data not found at {YEAST}")
def test_yeast_on_ray_equals_one_process(cluster, tmp_path, monkeypatch):
    """P = 2 here, 3 and 2 for the synthetic pairs with seeds below, 1 and 2 for the scale
    config: every P equals one process. Here each part's queries are searched in chunks."""
    from tfgm_dist import distributed
    monkeypatch.setattr(distributed, "SEARCH_CHUNK", 128)
    base = with_overrides(load_config(ROOT / "jobs" / "configs" / "yeast.toml"),
                          **{"refine.steps": 10, "search.k": 50})
    paths = dict(source=YEAST / "yeast0_Y2H1.txt", target=YEAST / "yeast10_Y2H1.txt")
    single = run_job(job(base, tmp_path / "single", 0, **paths))
    p = 2
    metrics = run_job(job(base, tmp_path / f"p{p}", p, **paths))
    assert_same_rows(tmp_path / "single", tmp_path / f"p{p}")
    assert metrics["ray"]["partitions"] == p
    assert len(list((tmp_path / f"p{p}" / "matches").iterdir())) == p
    roles = [proc["role"] for proc in metrics["ray"]["processes"]]
    assert roles[:4] == ["load source", "load target", "partition source", "partition target"]
    # each part cut out of the blocks, then the graph's halo exchange planned
    assert roles[4:6 + 2 * p] == [f"partition {g} {what}" for g in ("source", "target")
                                  for what in [*(f"part {q}" for q in range(p)), "halo"]]
    assert roles[6 + 2 * p:6 + 3 * p] == [f"part {q}" for q in range(p)]
    assert "refine+assign" in roles
    assert all(proc["peak_rss_bytes"] > 0 for proc in metrics["ray"]["processes"])
    # its own memory, without the object store's pages: below the peak of all it touched
    assert all(0 < proc["private_bytes"] < proc["peak_rss_bytes"]
               for proc in metrics["ray"]["processes"])
    assert {"embed", "search", "refine+assign", "write"} <= set(metrics["seconds"])
    assert single["rows"] == metrics["rows"] == 1004


def test_a_long_lived_actors_usage_sees_the_peak_of_its_own_memory_inside_a_call():
    # a part actor's memory peaks inside a layer's call and falls before it ends: sampled
    # only as calls end, that peak went unseen
    usage = Usage("part 0", every=0.01)
    time.sleep(0.05)
    before = usage.private
    block = np.ones(128 * 2**20 // 8)
    time.sleep(0.2)
    del block
    gc.collect()
    time.sleep(0.05)
    assert before is not None and usage.private - before >= 120 * 2**20


@pytest.mark.skipif(not YEAST.exists(), reason=f"benchmark data not found at {YEAST}")
def test_relations_join_the_embedding_on_ray_as_in_one_process(cluster, tmp_path):
    """Triples whose relations join the propagation as nodes: the two parts add up the
    roles' rows each layer, and a Ray run writes one process's matches, bit for bit
    (featureless yeast, where equal rows are many and a difference in the last bit reorders
    them: with the roles' rows summed in float32 it fails, at 10 layers with 11 other
    targets of 1,004), and not those of a run without the relations."""
    paths = {}
    for name, graph in (("source", "yeast0_Y2H1.txt"), ("target", "yeast10_Y2H1.txt")):
        u, v = np.loadtxt(YEAST / graph, dtype=np.int64).T
        paths[name] = tmp_path / f"{name}.triples"
        paths[name].write_text("".join(f"{a}\tr{(a + b) % 3}\t{b}\n" for a, b in zip(u, v)))
    base = with_overrides(load_config(ROOT / "jobs" / "configs" / "yeast.toml"),
                          **{"embed.layers": 4, "refine.steps": 10, "search.k": 50})
    run_job(job(base, tmp_path / "single", 0, **paths))
    run_job(job(base, tmp_path / "ray", 2, **paths))
    assert_equal_matches(rows(tmp_path / "single")[0], rows(tmp_path / "ray")[0])
    run_job(job(with_overrides(base, **{"embed.relations": False}), tmp_path / "plain", 0,
                **paths))
    assert not rows(tmp_path / "plain")[0].equals(rows(tmp_path / "single")[0])


ON_PARTS = {  # the refinement and decoding that run on the part actors; bootstrapping rounds
    "auction": ("false", True, "auto", 0),
    "auction, no seeds": ("false", False, "auto", 0),
    "refined": ("true", True, "auto", 0),
    "refined, hints of a seeded round": ("true", True, "auto", 1),
    # METIS or RCM read the whole graph in the partition task, where streaming reads blocks
    "refined, no seeds, whole-graph parts": ("true", False, "metis" if pymetis else "rcm", 0),
}


SLOW_ON_PARTS = {"refined, hints of a seeded round",  # the longest
                 "auction, no seeds"}  # its parts' inputs as the whole-graph case's, its auction


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=pytest.mark.slow) if case in SLOW_ON_PARTS else case
    for case in ON_PARTS])
def test_a_synthetic_pair_decoded_on_the_part_actors_equals_one_process(cluster, tmp_path,
                                                                        case):
    """Three parts, the sparse one-to-one auction on the part actors, without and with
    refinement (sharded like the embedding: both directions, seeds pinned), and anchored
    by the hints of a seeded bootstrapping round: the rows, scores, confidence and metrics
    are one process's. Without seeds the confidence is fitted on the mutual matches of
    every part's rows (unrefined, mutual among the rows listing a target: there is no
    backward search). (The other decoders run in one Ray
    task with the same code as in one process; every decoder is compared in
    test_pipeline.)"""
    refine, seeded, partitioner, rounds = ON_PARTS[case]
    # noisier features where a round is asked for: on the plainer pair the held-out run
    # already gets every seed right, and no round is kept
    noise = {"feature_noise": 4.0} if rounds else {}
    data = write_pair(tmp_path / "data", 1500, seed=3, **noise)
    paths = dict(source=data["source"], target=data["target"], gold=data["gold"])
    if seeded:
        paths["seeds"] = tmp_path / "seeds.parquet"
        pq.write_table(pq.read_table(data["gold"]).slice(0, 150), paths["seeds"])
    base = with_overrides(from_toml("""
        top_k = 3
        [embed]
        layers = 2
        [search]
        k = 10
        [refine]
        steps = 4
        dim = 32
        [assign]
        method = "one-to-one"
        one_to_one = "sparse"
    """), **{"refine.enabled": refine == "true", "ray.partitioner": partitioner,
             "bootstrap.rounds": rounds})
    single = run_job(job(base, tmp_path / "single", 0, **paths))
    p = 3
    metrics = run_job(job(base, tmp_path / f"p{p}", p, **paths))
    (ta, _), (tb, manifest) = rows(tmp_path / "single"), rows(tmp_path / f"p{p}")
    assert_equal_matches(ta, tb)
    decided = tb.filter(pc.and_(pc.equal(tb.column("rank"), 1),
                                pc.is_valid(tb.column("target_id"))))
    assert decided.num_rows > 0 and decided.column("confidence").null_count == 0
    for key in ("accuracy", "hits@1", "hits@10", "reliability", "estimate"):
        assert metrics[key] == single[key], key
    assert metrics["accuracy"] > 0.5
    if rounds:  # the final pass is anchored by the kept round's hints on the parts too
        assert metrics["auto"]["bootstrap"]["rounds"] == 1
        assert metrics["auto"]["bootstrap"]["hints"] > 0
    assert metrics["mrr"] == pytest.approx(single["mrr"], abs=1e-12)
    assert metrics["ray"]["partitioner"] == ("streaming" if partitioner == "auto"
                                             else partitioner)
    # the held-out passes of a seeded run held the whole pair in a task of their own, not
    # in the driver, and the seeded channels were made in one too
    roles = [proc["role"] for proc in metrics["ray"]["processes"]]
    loads = sum(r.startswith("load ") for r in roles)  # each graph's shares, a block a part
    assert [r.split()[:3] for r in roles[:loads] if "block" in r] == [
        ["load", g, "block"] for g in ("source", "target") for _ in range(p)]
    assert (roles[loads] == "prepare") == seeded and "prepare" not in roles[loads + 1:]
    stages = set(metrics["seconds"])
    assert "estimate" in stages if seeded else "estimate" not in stages
    assert "assign" in stages and "refine+assign" not in stages
    assert ("refine" in stages) == (refine == "true")
    assert [f["path"] for f in manifest["files"]] == [f"matches/part-{q:05d}.parquet"
                                                      for q in range(p)]
    meta = pq.read_schema(tmp_path / f"p{p}" / manifest["files"][-1]["path"]).metadata
    assert json.loads(meta[b"tfgm_dist.config"])["ray"]["partitions"] == p
    assert set(json.loads(meta[b"tfgm_dist.inputs"])) == {"source", "target", "gold",
                                                          *(["seeds"] if seeded else [])}


def test_without_gold_the_part_actors_decide_and_the_run_commits(cluster, tmp_path):
    """No ``--gold``: the parts' decided pieces are kept before the checkpoint says they
    are (the run once marked it before any part had made its folder, and failed)."""
    data = write_pair(tmp_path / "data", 1500, seed=3)
    base = with_overrides(from_toml("""
        [embed]
        layers = 2
        [refine]
        enabled = false
        [assign]
        method = "one-to-one"
        one_to_one = "sparse"
    """))
    paths = dict(source=data["source"], target=data["target"])
    run_job(job(base, tmp_path / "single", 0, **paths))
    metrics = run_job(job(base, tmp_path / "p3", 3, **paths))
    assert "accuracy" not in metrics and "assign" in metrics["seconds"]
    assert_equal_matches(rows(tmp_path / "single")[0], rows(tmp_path / "p3")[0])
    assert not list(tmp_path.glob(".p3.resume-*"))  # the checkpoint is gone once committed


def named(data: dict[str, Path], rng: np.random.Generator) -> None:
    """The pair's nodes named instead of described by vectors: the source's by random
    words, each target by its counterpart's name with a letter dropped from every third."""
    gold = pq.read_table(data["gold"])
    words = ["".join(rng.choice(list("abcdefghij"), 7)) for _ in range(gold.num_rows)]
    of = dict(zip(gold.column("source_id").to_pylist(), words))
    to = dict(zip(gold.column("target_id").to_pylist(), gold.column("source_id").to_pylist()))
    for side, name_of in (("source", of.get),
                          ("target", lambda t: of[to[t]][int(t[1:]) % 3 == 0:])):
        path = data[side] / "nodes.parquet"
        ids = pq.read_table(path).column("id").to_pylist()
        pq.write_table(pa.table({"id": ids, "name": [name_of(i) for i in ids]}), path)


def as_part_files(nodes: Path) -> None:
    """``nodes`` rewritten as Spark writes a table: a folder of part files, small row groups."""
    table = pq.read_table(nodes)
    nodes.unlink()
    nodes.mkdir()
    for i, start in enumerate(range(0, table.num_rows, 300)):
        pq.write_table(table.slice(start, 300), nodes / f"part-{i:05d}-c000.snappy.parquet",
                       row_group_size=64)
    (nodes / "_SUCCESS").write_text("")


@pytest.mark.parametrize("content", [  # "vectors" read as from part files: in the slow set
    "names", pytest.param("vectors", marks=pytest.mark.slow), "vectors in part files",
    "vectors and seeds"])
def test_the_parts_read_and_make_their_own_inputs_and_equal_one_process(cluster, tmp_path,
                                                                       monkeypatch, content):
    """Without seeds or bootstrapping each part reads its nodes' names or vectors from
    nodes.parquet and makes its input rows (the names' IDF summed over the parts); with
    seeds one task runs the held-out passes and another makes the tied and anchored rows
    from the whole pair. The rows and scores are one process's, and the driver never reads
    the content whole (for vectors the sample of the look-alike test, then without seeds
    one node's row for the width; for names that node's)."""
    data = write_pair(tmp_path / "data", 800, seed=7, feature_noise=2.0)
    if content == "names":
        named(data, np.random.default_rng(0))
    if content == "vectors in part files":
        for side in ("source", "target"):
            as_part_files(data[side] / "nodes.parquet")
    paths = dict(source=data["source"], target=data["target"], gold=data["gold"])
    if content == "vectors and seeds":
        paths["seeds"] = tmp_path / "seeds.parquet"
        pq.write_table(pq.read_table(data["gold"]).slice(0, 80), paths["seeds"])
    base = from_toml("""
        [search]
        k = 10
        [refine]
        steps = 4
        dim = 32
        [bootstrap]
        rounds = 0
    """)
    if content == "names":  # each part encodes its own nodes' names: sentence vectors too
        base = with_overrides(base, **{"features.encoder": True})
    single = run_job(job(base, tmp_path / "single", 0, **paths))
    whole, read = Graph.with_content, []

    def guarded(graph: Graph) -> Graph:
        assert graph.content is None, "the driver read a graph's content whole"
        return whole(graph)

    real_read = NodeContent._read
    monkeypatch.setattr(Graph, "with_content", guarded)
    monkeypatch.setattr(NodeContent, "_read", lambda c, nodes, columns: read.append(
        len(nodes)) or real_read(c, nodes, columns))
    two = run_job(job(base, tmp_path / "p2", 2, **paths))
    assert single["auto"]["kind"] == two["auto"]["kind"] == (
        "names" if content == "names" else "given")
    assert_same_rows(tmp_path / "single", tmp_path / "p2")
    (ta, _), (tb, _) = rows(tmp_path / "single"), rows(tmp_path / "p2")
    assert_equal_matches(ta, tb)
    assert two["accuracy"] == single["accuracy"] > 0.5
    assert two.get("estimate") == single.get("estimate")
    assert read == {"names": [1], "vectors and seeds": [800, 800]}.get(content, [800, 800, 1])


def test_a_bad_vector_found_by_a_part_is_one_error_and_nothing_is_written(cluster, tmp_path):
    data = write_pair(tmp_path / "data", 300, seed=1)
    nodes = pq.read_table(data["target"] / "nodes.parquet")
    vectors = nodes.column("features").to_pylist()
    vectors[17][3] = float("nan")
    pq.write_table(nodes.set_column(1, "features", pa.array(vectors)),
                   data["target"] / "nodes.parquet")
    out = tmp_path / "out"
    with pytest.raises(InputError, match=r"nodes\.parquet: node 't17' has a NaN"):
        run_job(job(Config(), out, 2, source=data["source"], target=data["target"]))
    assert not out.exists()


def test_count_vectors_are_rooted_alike_on_the_parts(cluster, tmp_path):
    """Whether the vectors are counts is a statistic of both graphs: the parts find it
    together, and their rows are one process's."""
    data = write_pair(tmp_path / "data", 300, seed=5)
    for g in ("source", "target"):  # counts from the synthetic vectors
        nodes = pq.read_table(data[g] / "nodes.parquet")
        x = np.stack(nodes.column("features").to_numpy(zero_copy_only=False))
        counts = np.round(np.abs(x) * 3).astype(np.float32)
        pq.write_table(nodes.set_column(1, "features", pa.array(list(counts))),
                       data[g] / "nodes.parquet")
    paths = dict(source=data["source"], target=data["target"], gold=data["gold"])
    plain = with_overrides(Config(), **{"bootstrap.rounds": 0})  # no hints: rows on the parts
    single = run_job(job(plain, tmp_path / "single", 0, **paths))
    run_job(job(plain, tmp_path / "p2", 2, **paths))
    (one, _), (two, _) = rows(tmp_path / "single"), rows(tmp_path / "p2")
    assert_equal_matches(one, two)
    assert single["accuracy"] > 0.5


@pytest.mark.skipif(torch.cuda.is_available(), reason="this host has a CUDA GPU: a part "
                    "actor placed on it starts")
def test_a_part_actor_that_cannot_start_is_one_error_at_once(cluster, tmp_path, monkeypatch,
                                                              capsys):
    """Its constructor fails: a restart would fail alike, so the run is not tried again."""
    import re
    import time
    from tfgm_dist import cli, distributed
    data = write_pair(tmp_path / "data", 300, seed=1)
    # a CUDA device on this CPU-only torch: the part actors fail as they move their graphs
    monkeypatch.setattr(distributed, "placement", lambda cpus, gpus, parts: (
        "cuda", cpus / parts, {"num_cpus": 0.1}))
    out, start = tmp_path / "out", time.monotonic()
    code = cli.main(["-q", "align", str(data["source"]), str(data["target"]), "--out",
                     str(out), "--partitions", "2"])
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 1 and len(said) == 1 and time.monotonic() - start < 60
    assert re.match(r"error: a part actor could not start: \w*Error: .*CUDA", said[0])
    assert not out.exists()


@pytest.mark.parametrize("handed_over", [True, False], ids=["handed over", "on the parts"])
def test_the_auction_on_actors_equals_one_process_on_tied_lists(cluster, monkeypatch,
                                                                handed_over):
    """tfgm_dist.distributed.one_to_one over two actors: the sources in two parts, the
    targets in two others; tied lists that take over 100 rounds give one process's
    matching, whether actor 0 finishes the rounds after ROUNDS_ON_PARTS or the parts do
    (lists too large to hand over)."""
    from jobs.bench_ray import lists
    from tfgm_dist import distributed
    from tfgm_dist.assign import sparse_one_to_one
    from tfgm_dist.distributed import ROUNDS_ON_PARTS, one_to_one
    from tfgm_dist.distributed.actors import AuctionSide

    if not handed_over:
        monkeypatch.setattr(distributed, "HANDOVER_ENTRIES", 0)
    n_s, n_t, P = 500, 520, 2
    c = lists(n_s, n_t, 10, 3, seed=4)  # 121 rounds (seed 3: 4,749, 85 s on Ray here)
    home = np.random.default_rng(0).integers(0, P, n_t)
    part = np.arange(n_s) % P
    rows = [[r[:100], r[100:]] for r in (np.flatnonzero(part == q) for q in range(P))]
    chunks = [[ray.put((c.scores[r].numpy(), c.index[r].numpy())) for r in rs] for rs in rows]
    sides = [ray.remote(AuctionSide).options(num_cpus=0.5).remote(f"part {q}")
             for q in range(P)]
    heard = []
    rounds = one_to_one(sides, chunks, rows, n_t, home, lambda e, info: heard.append(e))
    matched = np.full(n_s, -2)
    for q, side in enumerate(sides):
        matched[np.concatenate(rows[q])] = ray.get(side.matched.remote())
    on_parts = ROUNDS_ON_PARTS if handed_over else rounds + 1
    assert rounds > ROUNDS_ON_PARTS and heard == ["assign-round"] * on_parts
    np.testing.assert_array_equal(matched, sparse_one_to_one(c, n_t).numpy())


def scale_pair(tmp_path: Path) -> tuple[Config, dict]:
    """The scale example's settings (IVF-PQ, one-to-one) on a 4,000-node synthetic pair."""
    data = write_pair(tmp_path / "data", 4000, seed=5)
    base = load_config(ROOT / "jobs" / "configs" / "synthetic.toml")
    assert base.search.index == "ivfpq" and base.assign.method == "one-to-one"
    return base, dict(source=data["source"], target=data["target"], gold=data["gold"])


@pytest.mark.slow
def test_the_scale_config_tunes_nprobe_on_the_merged_shards(cluster, tmp_path):
    base, paths = scale_pair(tmp_path)
    single = run_job(job(base, tmp_path / "single", 0, **paths))
    assert single["search"]["forward"]["recall@1"] >= 0.995
    two = run_job(job(base, tmp_path / "p2", 2, **paths))
    one, shards = single["search"]["forward"], two["search"]["forward"]
    assert shards["recall@1"] >= 0.995
    assert shards["sample"] == one["sample"]
    # the shards copy one index trained on the whole base's sample: one process's lists,
    # and at most its nprobe (each shard re-ranks its own best codes)
    assert shards["nlist"] == one["nlist"] and shards["nprobe"] <= one["nprobe"]
    assert two["accuracy"] >= single["accuracy"] - 0.01 > 0.8


# 13 s; .ci/run --all (P = 2 and 3 equal one process in every run)
@pytest.mark.slow
def test_one_part_on_ray_equals_one_process_with_the_scale_config(cluster, tmp_path):
    base, paths = scale_pair(tmp_path)
    single = run_job(job(base, tmp_path / "single", 0, **paths))
    one = run_job(job(base, tmp_path / "p1", 1, **paths))
    assert_same_rows(tmp_path / "single", tmp_path / "p1")
    assert one["search"] == single["search"]


# Where a part actor is killed, the settings that reach that stage, and the moment. Slow
# (18-25 s each; .ci/run --all). Mid-embedding is also flaky (2 of about 10 full runs on
# 2026-11-24: once failed and took pytest down, once the driver waited forever after the
# kill): in the slow set until the restart is made reliable.
KILLS = {
    "mid-embedding": ("[embed]\nlayers = 4\n[search]\nk = 10",
                      lambda event, info: event == "embed-layer" and info["graph"] == 1
                      and info["layer"] == 3),
    "in the auction": ("[refine]\nenabled = false\n[assign]\none_to_one = \"sparse\"",
                       lambda event, info: event == "assign-round" and info["round"] == 2),
    "in the refinement": ("[refine]\nenabled = true\nsteps = 4\ndim = 32\n[bootstrap]\n"
                          "rounds = 0\n[assign]\none_to_one = \"sparse\"",
                          lambda event, info: event == "refine-step" and info["direction"] == 1
                          and info["step"] == 2),
}


@pytest.mark.slow
@pytest.mark.parametrize("stage", KILLS)
def test_an_actor_killed_is_restarted_and_the_output_is_identical(cluster, tmp_path, stage):
    settings, moment = KILLS[stage]
    data = write_pair(tmp_path / "data", 1500, seed=5)
    base = from_toml(settings)
    paths = dict(source=data["source"], target=data["target"], gold=data["gold"])
    run_job(job(base, tmp_path / "calm", 2, **paths))
    killed = []

    def kill(event: str, info: dict) -> None:
        if moment(event, info) and not killed:
            ray.kill(info["workers"][1], no_restart=False)
            killed.append(info["workers"][1])

    run_job(job(base, tmp_path / "killed", 2, **paths), OnRay(kill))
    assert killed
    assert_same_rows(tmp_path / "calm", tmp_path / "killed")


@pytest.mark.slow
# split_block ends before it is seen
@pytest.mark.parametrize("task", ["read_share", "read_text_share", "number_share",
                                  "join_block", "parted", "part_of_graph", "exchanged"])
def test_a_worker_killed_while_it_loads_or_partitions_a_graph_is_replaced_and_the_output_is_identical(
        cluster, tmp_path, monkeypatch, task):
    """A task that loads a graph (reading a share of its row groups or a byte range of its
    edge list, numbering it, joining a block) or partitions it (streaming over the blocks,
    joining a part's pieces) runs again in a new worker when its own is killed (SIGKILL, as
    the kernel's OOM killer would), and the run writes the same rows."""
    psutil = pytest.importorskip("psutil")
    data = write_pair(tmp_path / "data", 3000, seed=5)
    base = from_toml("[bootstrap]\nrounds = 0")
    paths = dict(source=data["source"], target=data["target"], gold=data["gold"])
    if task == "read_text_share":
        monkeypatch.setattr(shares, "TEXT_SHARE_BYTES", 1 << 12)
        del paths["gold"]  # it names nodes without edges, which an edge list leaves out
        for g in ("source", "target"):
            edges = pq.read_table(data[g] / "edges.parquet", columns=["src", "dst"])
            paths[g] = _edge_list(tmp_path / f"{g}.tsv", [
                f"{a}\t{b}" for a, b in zip(edges["src"].to_pylist(), edges["dst"].to_pylist())])
    run_job(job(base, tmp_path / "calm", 2, **paths))
    killed, stop = [], threading.Event()

    def hunt() -> None:  # a worker running the task is titled after it
        # Ray's workers listed every 50 ms, their titles read each half millisecond: a scan
        # of every process each 2 ms missed the halo task (tens of ms) in 2 runs of 3
        title, workers, listed = f"ray::{task}".encode(), [], 0.0
        while not stop.is_set() and not killed:
            if time.monotonic() - listed > 0.05:
                workers = [p.pid for p in psutil.process_iter(["cmdline"])
                           if (p.info["cmdline"] or [""])[0].startswith("ray::")]
                listed = time.monotonic()
            for pid in workers:
                try:
                    running = Path(f"/proc/{pid}/cmdline").read_bytes().startswith(title)
                except OSError:  # it ended
                    continue
                if running:
                    psutil.Process(pid).kill()
                    killed.append(pid)
                    break
            time.sleep(0.0005)

    hunter = threading.Thread(target=hunt)
    hunter.start()
    try:
        run_job(job(base, tmp_path / "killed", 2, **paths))
    finally:
        stop.set()
        hunter.join()
    assert killed
    assert_same_rows(tmp_path / "calm", tmp_path / "killed")


def from_toml(text: str) -> Config:
    import textwrap
    import tomllib

    from tfgm_dist.config import from_dict
    return from_dict(tomllib.loads(textwrap.dedent(text)))
