"""Supervised TFGMws: match two graphs through a collection of labelled graphs, without training.

The paper's algorithm "TFGMws for the supervised setting": a collection
:math:`\\mathcal{D} = \\{\\mathcal{G}^{(1)}, \\dots, \\mathcal{G}^{(N)}\\}` labels its nodes,
an equal label marking equivalent nodes across graphs. Each node :math:`i` of a query graph
(the source or the target) gets a label-discriminative feature

.. math::
    \\hat{S}^{(n)}, U^{(n)} = \\mathrm{TFGM}(\\mathcal{G}, \\mathcal{G}^{(n)}), \\qquad
    \\mathcal{L}_i = \\mathrm{kLargest}\\{U^{(n)}_{iv} : \\hat{S}^{(n)}_{iv} = 1,\\;
    n = 1..N\\}, \\qquad
    \\mathbf{k}_i = \\sum_{v \\in \\mathcal{L}_i} \\mathbf{y}_v,

(one matched node per collection graph, the :math:`k` best of those, the sum of their
one-hot labels :math:`\\mathbf{y}_v`), and source and target are matched on
:math:`\\cos(\\mathbf{k}_i, \\mathbf{k}_j)`. Here:

- every collection graph and both query graphs are embedded by one weight-free GNN (one
  seed, one feature space: the collection is one disjoint-union graph);
- one FAISS search of each query node against *all* labelled nodes at once
  (:func:`collection_candidates`), widened for the rows that do not yet see :math:`k`
  distinct graphs; with ``ray.partitions`` = P the labelled nodes are sharded over P Ray
  actors (:class:`tfgm_dist.distributed.ShardedIndex`);
- :math:`\\hat{S}^{(n)}` is ``argmax`` (the best hit, the paper's keypoint setting) or a
  one-to-one assignment per collection graph, all graphs in one sparse LAP (a node it
  leaves unmatched keeps its best hit, so every node gets a feature); with
  ``refine.enabled`` the candidates are first refined (training-free DGMC) per collection
  graph, as the paper's DGMC variant does. The graphs are ranked by the TFGM score
  :math:`U^{(n)}_{iv}` of the matched node (not by its refined probability, which is 1 in
  a graph holding a single candidate);
- the final match is the ordinary pipeline (search, refinement, assignment) on the vectors
  :math:`\\mathbf{k}_i`.

Refinement per collection graph needs each query node's softmax over *one* graph's nodes, so
it runs on :math:`N` copies of the query graph (copy :math:`n` holds the candidates in graph
:math:`n`): one call for all graphs, memory :math:`O(N |V| R)`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
import torch.nn.functional as F

from . import assign
from .config import Config, EmbedConfig, FeatureConfig
from .embed import Operator, graph_operator, sparse_on_purpose, whole
from .errors import InputError
from .graph import Graph
from .load import load_graph, load_labels
from .pipeline import Pair, Result, align, channels, embeddings, operators, search_options
from .refine import refine
from .search import Candidates, build_index, search
from .stopwatch import Stopwatch

LABEL_SUFFIXES = (".labels", ".labels.parquet")
# label histograms are matched at full width up to 2^28 cells (1 GiB dense), else projected
LABEL_CELLS, LABEL_DIM = 1 << 28, 256

log = logging.getLogger(__name__)

# Top-``width`` labelled nodes (rows of the collection) of every query row.
Nearest = Callable[[np.ndarray, int], Candidates]


@dataclass(frozen=True)
class Collection:
    """Labelled graphs as one disjoint-union graph.

    Attributes:
        graph: the union; node ids ``"<graph name>/<id>"``.
        member: ``[M]`` int64 collection graph of each node.
        label: ``[M]`` int64 label number of each node.
        names: the graphs' names, in ``member`` order.
        labels: the label (string) of each label number.
    """

    graph: Graph
    member: torch.Tensor
    label: torch.Tensor
    names: tuple[str, ...]
    labels: pa.Array

    @property
    def num_graphs(self) -> int:
        return len(self.names)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @staticmethod
    def of(graphs: list[Graph], labels: list[list[str]], names: list[str],
           source: str = "<collection>") -> "Collection":
        """The collection of ``graphs``; ``labels[g][i]`` labels node ``i`` of graph ``g``."""
        if not graphs:
            raise InputError(f"{source}: the collection holds no graph")
        for g, y, name in zip(graphs, labels, names, strict=True):
            if len(y) != g.num_nodes:
                raise InputError(f"{source}: graph {name} has {g.num_nodes} nodes and "
                                 f"{len(y)} labels")
        distinct, label = np.unique(np.concatenate([np.asarray(y, dtype=str) for y in labels]),
                                    return_inverse=True)
        sizes = [g.num_nodes for g in graphs]
        return Collection(disjoint_union(graphs, names, source),
                          torch.from_numpy(np.repeat(np.arange(len(graphs)), sizes)),
                          torch.from_numpy(label.astype(np.int64)), tuple(names),
                          pa.array(distinct.tolist(), pa.string()))


def disjoint_union(graphs: list[Graph], names: list[str], source: str) -> Graph:
    """One graph holding ``graphs`` side by side (node ids ``"<name>/<id>"``).

    Names and features are kept when every graph has them; a weight-free GNN embeds each
    component exactly as it embeds the graph alone.
    """
    offsets = np.cumsum([0] + [g.num_nodes for g in graphs])
    ids = pa.concat_arrays([pc.binary_join_element_wise(name + "/", g.ids.cast(pa.string()), "")
                            for g, name in zip(graphs, names)])
    weighted = any(g.edge_weight is not None for g in graphs)
    feats = [g.features for g in graphs]
    same_width = all(f is not None for f in feats) and len({f.size(1) for f in feats}) == 1
    return Graph(
        ids=ids,
        edge_index=torch.cat([g.edge_index + int(o) for g, o in zip(graphs, offsets)], 1),
        edge_weight=torch.cat([torch.ones(g.num_edges) if g.edge_weight is None
                               else g.edge_weight.float() for g in graphs]) if weighted else None,
        names=([n for g in graphs for n in g.names]
               if all(g.names is not None for g in graphs) else None),
        features=torch.cat(feats) if same_width else None,
        source=source,
    )


# ---------------------------------------------------------------------------------------------
# Loading


def load_collection(folder: str | Path, seed: int | None = None) -> Collection:
    """A folder of labelled graphs, in name order.

    Each entry is a graph: a folder in the Parquet layout whose ``nodes.parquet`` has a
    ``label`` column, or a graph file (edge list, triples, ``.gw``) with a label file beside
    it, ``<stem>.labels`` (two columns: node id, label; TSV/CSV/whitespace) or
    ``<stem>.labels.parquet``. Every node needs a label, and labels are unique within a graph.
    With ``seed`` every graph's nodes are put in a seeded random order, as ``load_pair`` does
    for the target, so that no FAISS tie-break favours the node that shares a query node's
    position in its file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: a collection is a folder of labelled graphs")
    entries = sorted(p for p in folder.iterdir() if not p.name.startswith("."))
    label_files = {_label_stem(p): p for p in entries if _label_stem(p) is not None}
    graphs, labels, names = [], [], []
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    for path in entries:
        if _label_stem(path) is not None:
            continue
        name = path.name if path.is_dir() else path.stem
        if name in names:
            raise InputError(f"{path}: a second graph named {name!r} in the collection")
        if path.is_dir():
            graph = load_graph(path, "parquet")
            labels.append(load_labels(path, graph))
        else:
            if name not in label_files:
                raise InputError(f"{path}: no label file {name}.labels or "
                                 f"{name}.labels.parquet beside it")
            graph = load_graph(path)
            labels.append(load_labels(label_files.pop(name), graph))
        if gen is not None:
            perm = torch.randperm(graph.num_nodes, generator=gen)
            graph, labels[-1] = graph.permuted(perm), [labels[-1][i] for i in perm.tolist()]
        graphs.append(graph)
        names.append(name)
    if label_files:
        stray = next(iter(label_files.values()))
        raise InputError(f"{stray}: no graph file named {_label_stem(stray)} beside it")
    return Collection.of(graphs, labels, names, str(folder))


def _label_stem(path: Path) -> str | None:
    for suffix in LABEL_SUFFIXES:
        if path.is_file() and path.name.endswith(suffix):
            return path.name[:-len(suffix)]
    return None


# ---------------------------------------------------------------------------------------------
# The kNN label features


def _graphs_seen(c: Candidates, member: torch.Tensor) -> torch.Tensor:
    """Number of distinct collection graphs in each candidate row."""
    g = member[c.index.clamp(min=0)].masked_fill(c.index < 0, -1).sort(dim=1).values
    return ((g[:, 1:] != g[:, :-1]) & (g[:, 1:] >= 0)).sum(1) + (g[:, 0] >= 0).long()


def collection_candidates(o: torch.Tensor, nearest: Nearest, member: torch.Tensor,
                          num_graphs: int, k: int, width: int) -> Candidates:
    """Each query row's top labelled nodes: ``width`` of them, or as many as it takes to see
    ``min(k, num_graphs)`` distinct graphs.

    The best hit of a graph is its first node in the ranked list, so the ``k`` graphs with
    the best best-hits are the first ``k`` distinct graphs of the list: exact, with one
    search of all labelled nodes, re-run wider only for the rows that are short.
    """
    total, need = member.numel(), min(k, num_graphs)
    queries = np.ascontiguousarray(o.numpy(), dtype=np.float32)
    width = min(max(width, need), total)
    c = nearest(queries, width)
    while c.k < total:
        short = _graphs_seen(c, member) < need
        if not short.any():
            break
        width = min(2 * width, total)
        wider = nearest(queries[short.numpy()], width)
        pad = width - c.k
        scores = F.pad(c.scores, (0, pad), value=-torch.inf)
        index = F.pad(c.index, (0, pad), value=-1)
        scores[short], index[short] = wider.scores, wider.index
        c = Candidates(scores, index)
    return c


def per_graph(c: Candidates, member: torch.Tensor, num_graphs: int) -> Candidates:
    """The candidate lists split by collection graph: row ``g * n + i`` lists, in rank
    order, the candidates of query row ``i`` in graph ``g``; ``[num_graphs * n, w]`` with
    ``w`` the most candidates one row has in one graph."""
    n = c.index.size(0)
    valid = c.index >= 0
    rows = (member[c.index.clamp(min=0)] * n + torch.arange(n)[:, None])[valid]
    order = torch.argsort(rows, stable=True)  # stable: rank order within a (g, i) group
    rows = rows[order]
    pos = torch.arange(rows.numel()) - torch.searchsorted(rows, rows)
    width = int(pos.max()) + 1 if pos.numel() else 1
    scores = torch.full((num_graphs * n, width), -torch.inf)
    index = torch.full((num_graphs * n, width), -1, dtype=torch.long)
    scores[rows, pos], index[rows, pos] = c.scores[valid][order], c.index[valid][order]
    return Candidates(scores, index)


def _copies(op: Operator, times: int) -> Operator:
    """``times`` disjoint copies of the graph operator ``op``."""
    shift = (torch.arange(times) * op.num_nodes).repeat_interleave(op.edge_index.size(1))
    return Operator(op.edge_index.repeat(1, times) + shift, op.edge_weight.repeat(times),
                    op.num_nodes * times)


def label_features(o: torch.Tensor, op: Operator, nearest: Nearest, collection: Collection,
                   collection_op: Operator, cfg: Config) -> torch.Tensor:
    """:math:`\\mathbf{k}_i` ``[n, #labels]`` of every node of one query graph, as a sparse
    COO tensor (at most ``supervised.k`` labels a row).

    Args:
        o: the query graph's TFGM embedding ``[n, D]`` (same GNN as the collection's).
        op: its graph operator (refinement propagates over it).
        nearest: top-``w`` search over the collection's embeddings (rows = union nodes).
        collection, collection_op: the labelled graphs and their union's operator.
        cfg: ``supervised`` (k, match), ``search.k`` (list width), ``refine``.
    """
    sc, n, g = cfg.supervised, o.size(0), collection.num_graphs
    u = per_graph(collection_candidates(o, nearest, collection.member, g, sc.k, cfg.search.k),
                  collection.member, g)
    s = u
    if cfg.refine.enabled:
        rc, ec = cfg.refine, cfg.embed
        psi = EmbedConfig(layers=rc.layers, operator=ec.operator, self_loops=ec.self_loops,
                          include_input=rc.include_input)
        s = refine(u, whole(_copies(op, g)), whole(collection_op), steps=rc.steps, dim=rc.dim,
                   psi=psi, scale=ec.unit_blocks, seed=cfg.seed)
    best = assign.argmax(s)
    if sc.match == "one-to-one":  # a node the sparse assignment leaves out keeps its best hit
        matched = assign.one_to_one(s, collection.graph.num_nodes, method="sparse")
        best = torch.where(matched >= 0, matched, best)
    hit = (u.index == best[:, None]) & (best[:, None] >= 0)
    score = torch.where(hit, u.scores, -torch.inf).max(1).values.view(g, n).T
    best = best.view(g, n).T
    top = torch.argsort(score, dim=1, descending=True, stable=True)[:, :min(sc.k, g)]
    chosen, ok = best.gather(1, top), score.gather(1, top) > -torch.inf
    rows = torch.arange(n)[:, None].expand_as(chosen)
    at = torch.stack([rows[ok], collection.label[chosen[ok]]])
    with sparse_on_purpose():  # at most k votes a row: sparse
        return torch.sparse_coo_tensor(at, torch.ones(at.size(1)), (n, collection.num_labels)
                                       ).coalesce()


# ---------------------------------------------------------------------------------------------
# Alignment


def _operator(graph: Graph, cfg: Config) -> Operator:
    ec = cfg.embed
    return graph_operator(graph.edge_index, graph.num_nodes, ec.operator,
                          self_loops=ec.self_loops, edge_weight=graph.edge_weight)


def match_vectors(pair: Pair, x_s: torch.Tensor, x_t: torch.Tensor, cfg: Config,
                  watch: Stopwatch | None = None) -> Result:
    """Match on :math:`\\cos(x_{s,i}, x_{t,j})` with the pipeline's search, refinement and
    assignment stages (``cfg.features`` and ``cfg.embed.layers`` are not used). Sparse
    vectors wider than :data:`LABEL_CELLS` allow are projected to :data:`LABEL_DIM` (the
    cosines kept in expectation), never made dense at full width."""
    ec = cfg.embed
    cells = (x_s.size(0) + x_t.size(0)) * x_s.size(1)
    project = LABEL_DIM if x_s.is_sparse and cells > LABEL_CELLS else 0
    if project:
        log.info("supervised: %d labels projected to %d (%d nodes)", x_s.size(1), project,
                 x_s.size(0) + x_t.size(0))
    # the histograms stay as they are: the root of counts was measured on attributes only
    plain = replace(cfg, features=FeatureConfig(kind="given", project_dim=project,
                                                root_counts=False),
                    embed=EmbedConfig(layers=0, operator=ec.operator, self_loops=ec.self_loops))
    given = replace(pair, source=replace(pair.source, features=x_s),
                    target=replace(pair.target, features=x_t))
    return align(given, plain, watch)


def embed_with_collection(pair: Pair, collection: Collection, cfg: Config
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TFGM embeddings ``O_c, O_s, O_t`` of the collection, source and target: one feature
    space (n-gram IDF, degree vocabulary, projection) and one GNN draw for all of them."""
    queries = disjoint_union([pair.source, pair.target], ["source", "target"], "source + target")
    both = Pair(collection.graph, queries)
    o_c, o_q = embeddings(channels(both, cfg), operators(both, cfg), cfg.seed)
    n_s = pair.source.num_nodes
    return o_c, o_q[:n_s], o_q[n_s:]


def align_labelled(pair: Pair, collection: Collection, o_c: torch.Tensor, o_s: torch.Tensor,
                   o_t: torch.Tensor, cfg: Config, watch: Stopwatch | None = None) -> Result:
    """The kNN step and the final match, from embeddings of the collection and the pair.

    Any embedding works (e.g. :class:`tfgm_dist.geometric.RandomGMM`'s) as long as the
    three come from the same network and ``cfg.embed.unit_blocks`` is their largest score.
    """
    watch = watch or Stopwatch()
    with watch.stage("knn"):
        if cfg.ray.partitions:  # the labelled nodes sharded over Ray actors
            from .distributed import ShardedIndex, connect
            connect(cfg.ray.address)
            nearest = ShardedIndex(o_c.numpy(), cfg.ray.partitions, search_options(cfg))
        else:
            nearest = partial(search, build_index(o_c.numpy(), **search_options(cfg)))
        op_c = _operator(collection.graph, cfg)
        try:
            k_s, k_t = (label_features(o, _operator(g, cfg), nearest, collection, op_c, cfg)
                        for o, g in ((o_s, pair.source), (o_t, pair.target)))
        finally:
            if cfg.ray.partitions:
                nearest.close()
    return match_vectors(pair, k_s, k_t, cfg, watch)


def align_supervised(pair: Pair, collection: Collection, cfg: Config,
                     watch: Stopwatch | None = None) -> Result:
    """Supervised TFGMws on a loaded pair: embed, kNN label features, match; metrics with gold."""
    if pair.seeds is not None:
        raise InputError("the supervised setting takes no seed pairs (labels replace them)")
    watch = watch or Stopwatch()
    with watch.stage("embed"):
        o_c, o_s, o_t = embed_with_collection(pair, collection, cfg)
    return align_labelled(pair, collection, o_c, o_s, o_t, cfg, watch)
