"""The single-process pipeline: load -> features -> embed -> search -> refine -> assign -> write.

Each stage is a function of the previous stages' outputs, timed with its peak memory.
Conventions every stage relies on:

- The target graph is renumbered in a seeded random order right after loading, so no
  tie-break anywhere (FAISS, scipy) can favour a target whose number equals the source's.
- Seed pairs are known matches: they shape the features (tied content, anchors), are
  pinned in the refinement, and their targets are never offered to other sources.
- ``candidates`` restricts the targets searched; ``queries`` restricts the sources output
  (default: every source); seed sources are never output, and gold pairs only count when
  their source is output.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from . import assign, features, metrics
from .config import Config, EmbedConfig, FeatureConfig
from .embed import (Operator, embed_blocks, graph_operator, layer_params, role_share,
                    row_block, whole, with_roles)
from .errors import InputError
from .graph import Graph
from .load import load_graph, load_id_list, load_pairs
from .refine import merge, refine
from .search import (Candidates, both_ways, both_ways_pays, gpu_available, on_device, taken,
                     top_k)
from .stopwatch import Stopwatch

log = logging.getLogger("tfgm_dist")


@dataclass(frozen=True)
class Pair:
    """Two loaded graphs and everything said about them, in contiguous node numbers."""

    source: Graph
    target: Graph
    seeds: tuple[np.ndarray, np.ndarray] | None = None
    gold: tuple[np.ndarray, np.ndarray] | None = None
    candidates: np.ndarray | None = None  # target numbers to search among
    queries: np.ndarray | None = None  # source numbers to output
    # pairs the job believes matched (bootstrapping, :func:`tfgm_dist.auto.prepare`): anchors
    # like the seeds, but still searched and output
    hints: tuple[np.ndarray, np.ndarray] | None = None
    inputs: "Inputs | None" = field(default=None, repr=False, compare=False)  # with_inputs

    def __post_init__(self) -> None:
        if self.seeds is not None:  # by source: the order of a seed file's lines is no input
            order = np.argsort(self.seeds[0], kind="stable")
            object.__setattr__(self, "seeds", (self.seeds[0][order], self.seeds[1][order]))

    def with_content(self) -> "Pair":
        """The pair with both graphs' names and vectors read (:meth:`Graph.with_content`)."""
        return replace(self, source=self.source.with_content(),
                       target=self.target.with_content())

    def anchored(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The seeds and the hints together: the pairs the anchor channel is built from."""
        if self.hints is None:
            return self.seeds
        if self.seeds is None:
            return self.hints
        return tuple(np.concatenate([a, b]) for a, b in zip(self.seeds, self.hints))


def load_pair(source: str | Path | Graph, target: str | Path | Graph, cfg: Config, *,
              fmt: str | None = None, seeds: str | Path | None = None,
              gold: str | Path | None = None, candidates: str | Path | None = None,
              queries: str | Path | None = None,
              loaded: Callable[[str | Path, str | Path], tuple[Graph, Graph]] | None = None
              ) -> Pair:
    """Load both graphs (or take them as given), each :func:`ordered`, and resolve the id
    files. ``loaded(source, target)`` loads and orders both graphs elsewhere, given their
    paths (a Ray run's workers, :func:`tfgm_dist.distributed.loaded`); by default, or for a
    graph given, it is done here."""
    if loaded is not None and not isinstance(source, Graph) and not isinstance(target, Graph):
        g_s, g_t = loaded(source, target)
    else:
        g_s, g_t = (ordered(g if isinstance(g, Graph) else
                            load_graph(g, fmt, cfg.job.columns), cfg, is_target)
                    for is_target, g in ((False, source), (True, target)))
    return Pair(
        g_s, g_t,
        seeds=None if seeds is None else load_pairs(seeds, g_s, g_t, "seeds"),
        gold=None if gold is None else load_pairs(gold, g_s, g_t, "gold"),
        candidates=None if candidates is None else load_id_list(candidates, g_t, "candidates"),
        queries=None if queries is None else load_id_list(queries, g_s, "queries"),
    )


def ordered(graph: Graph, cfg: Config, is_target: bool) -> Graph:
    """``graph`` with its nodes numbered in the order of their ids, and a target's then in
    an order drawn from ``cfg.seed``.

    Numbered by id, not by first appearance, and with the seed pairs in the order of their
    sources (:class:`Pair`), a run does not depend on the order of the rows of its input
    files: ties (the auction's lowest source number) and the seeded draws (refinement's
    indicators, the anchors' vectors, the held-out seeds) fall alike however a file was
    written; the target's drawn order keeps any tie-break (FAISS, scipy's assignment) from
    favouring a target whose number equals the source's."""
    graph = graph.by_id()
    if not is_target:
        return graph
    gen = torch.Generator().manual_seed(cfg.seed)
    return graph.permuted(torch.randperm(graph.num_nodes, generator=gen))


@dataclass(frozen=True)
class Inputs:
    """The content channel's ``X_s, X_t`` (:func:`input_features`) of two graphs under one
    features setting, kept on a :class:`Pair` (:func:`with_inputs`) for the passes of an
    automatic run that align the same graphs: on DBP15k with seeds five passes had hashed
    the names five times, 1 s each of a 37 s run."""

    source: Graph
    target: Graph
    features: FeatureConfig
    x_s: torch.Tensor
    x_t: torch.Tensor


def with_inputs(pair: Pair, cfg: Config) -> Pair:
    """``pair`` carrying its :func:`input_features` under ``cfg``: every pass on it (or on a
    pair replaced from it with the same graphs) reuses them."""
    return replace(pair, inputs=Inputs(pair.source, pair.target, cfg.features,
                                       *input_features(pair, cfg)))


def feature_kind(pair: Pair, cfg: Config) -> str:
    """The content channel's kind: ``cfg.features.kind``, or for ``auto`` given vectors, else
    names, else the sinusoidal degree encoding."""
    s, t, kind = pair.source, pair.target, cfg.features.kind
    if kind != "auto":
        return kind
    return ("given" if s.has_features and t.has_features
            else "names" if s.has_names and t.has_names
            else "degree-sinusoidal")


@dataclass(frozen=True)
class Content:
    """What a node's row of the content channel's ``X`` depends on besides the node itself:
    the kind (:func:`feature_kind`), and the statistics of both graphs together, the names'
    IDF or the degree vocabulary. Any share of the rows is then computed alike
    (:func:`content_rows`): in one process, or on the part of a run on Ray that holds them.

    The statistics are sums over rows (:func:`content_counts`), so each part can count its
    own and the driver add them up (:meth:`of`).

    Given vectors of counts (every value of both graphs a non-negative integer) are
    square-rooted (``counts``): a count's noise grows with it (Poisson: the variance is the
    mean), and the root makes it even (Anscombe), so that the cosine of two rows, the
    Hellinger affinity of their profiles, is not ruled by the largest columns. On the
    development pairs of ``python -m jobs.bench_social --only counts`` (17 or 100 Poisson
    counts per node) it lifted Hits@1 by 1.2 to 12.2 points with seeds and 0.5 to 9.6
    without, wherever the raw counts had not matched every node already. Vectors of 0 and
    1 are their own roots; real-valued vectors are not touched (on non-negative ones with
    additive noise the root cost 8.5 to 19.8 points)."""

    kind: str
    idf: torch.Tensor | None = None  # names: [ngram_dim]
    vocab: torch.Tensor | None = None  # degree-onehot: the sorted degrees of both graphs
    counts: bool = False  # given: vectors of counts, square-rooted

    @staticmethod
    def of(kind: str, counts: list) -> "Content":
        """The content of ``kind`` from the :func:`content_counts` of every share of rows."""
        if kind == "names":
            return Content(kind, idf=features.inverse_document_frequency(
                sum(df for df, _ in counts), sum(n for _, n in counts)))
        if kind == "degree-onehot":
            return Content(kind, vocab=torch.unique(torch.cat(counts)))
        if kind == "given":
            rooted = bool(counts) and all(counts)
            if rooted:
                log.info("features: the given vectors are counts (non-negative integers)")
            return Content(kind, counts=rooted)
        return Content(kind)


def content_kind(pair: Pair, cfg: Config) -> str:
    """:func:`feature_kind`, checked: both graphs hold what it reads, vectors of one width."""
    s, t = pair.source, pair.target
    kind = feature_kind(pair, cfg)
    for g in (s, t):
        if kind == "given" and not g.has_features:
            raise InputError(f"{g.source}: features.kind = 'given' but the graph has no "
                             "feature vectors")
        if kind == "names" and not g.has_names:
            raise InputError(f"{g.source}: features.kind = 'names' but the graph has no names")
    if kind == "given" and s.feature_width != t.feature_width:
        raise InputError(f"feature widths differ: {s.source} has {s.feature_width}, "
                         f"{t.source} has {t.feature_width}")
    return kind


def node_inputs(graph: Graph, kind: str, cfg: Config, degrees: torch.Tensor | None = None
                ) -> features.Names | torch.Tensor:
    """What :func:`content_rows` turns into ``graph``'s rows: its names (hashed into
    n-grams, :class:`~tfgm_dist.features.Names`) or given vectors (read from the input where
    left there, :attr:`Graph.content`), or its degrees (``degrees``, where the caller has
    them: a part's nodes have no edges of their own)."""
    every, fc = np.arange(graph.num_nodes), cfg.features
    if kind == "given":
        return graph.features if graph.features is not None else graph.content.features(every)
    if kind == "names":
        names = graph.names if graph.names is not None else graph.content.names(every)
        return features.Names.hashed(names, fc.ngram, fc.ngram_dim)
    return features.degrees(graph) if degrees is None else degrees


def content_counts(kind: str, inputs: features.Names | torch.Tensor) -> Any:
    """The share of :class:`Content`'s statistics that ``inputs`` (:func:`node_inputs`) hold:
    for names the document frequency of each n-gram bucket and the number of names, for
    one-hot degrees the degrees present, for given vectors whether they are counts (every
    value a non-negative integer); ``None`` for the other kinds."""
    if kind == "names":
        return features.document_frequency(inputs.counts), len(inputs.texts)
    if kind == "degree-onehot":
        return torch.unique(inputs)
    if kind == "given":
        return features.are_counts(inputs)
    return None


def counted(kind: str, cfg: Config) -> bool:
    """Whether the :class:`Content` of ``kind`` is made from the rows'
    :func:`content_counts`: for names and one-hot degrees always, for given vectors where
    counts are to be square-rooted (``features.root_counts``)."""
    return kind in ("names", "degree-onehot") or kind == "given" and cfg.features.root_counts


def content_rows(content: Content, inputs: features.Names | torch.Tensor, cfg: Config,
                 where: Callable[[int], str] | None = None) -> torch.Tensor:
    """The rows of the content channel's ``X`` for ``inputs`` (:func:`node_inputs`), dense
    and, past ``features.project_dim``, projected. Each row depends only on its own node
    and ``content``. ``where(i)`` names input ``i`` in the error on a NaN or infinite
    value and the warning on an all-zero row (:func:`features.validate`)."""
    fc, kind = cfg.features, content.kind
    where = where or (lambda i: f"row {i}")
    if kind == "given":
        x = inputs.float()
        if content.counts and fc.root_counts:
            x = x.sqrt()
    elif kind == "names":
        x = features.tf_idf(inputs.counts, content.idf)
        if fc.encoder:  # two unit-norm blocks side by side: the bigrams, the sentence vectors
            features.validate(x, where)
            blocks = [features.unit_rows(x), features.sentence_vectors(inputs.texts)
                      if inputs.vectors is None else inputs.vectors]
            if fc.project_dim and fc.project_dim < sum(b.size(1) for b in blocks):
                return features.projected_side_by_side(blocks, fc.project_dim, cfg.seed)
            return torch.cat([features.dense(b) for b in blocks], dim=1)
    elif kind == "degree-onehot":
        x = features.degree_onehot(inputs, content.vocab)
    else:
        x = features.degree_sinusoidal(inputs, fc.sinusoidal_dim)
    features.validate(x, where)
    if fc.project_dim and fc.project_dim < x.size(1):
        x = features.random_projection([x], fc.project_dim, cfg.seed)[0]
    return features.dense(x)


def input_features(pair: Pair, cfg: Config) -> tuple[torch.Tensor, torch.Tensor]:
    """``X_s, X_t`` of the content channel (see :func:`feature_kind`): :func:`content_rows`
    of every node, the statistics of both graphs together; those the pair carries
    (:func:`with_inputs`) where made of the same graphs under the same features setting."""
    s, t, made = pair.source, pair.target, pair.inputs
    if (made is not None and made.source is s and made.target is t
            and made.features == cfg.features):
        return made.x_s, made.x_t
    kind = content_kind(pair, cfg)
    inputs = [node_inputs(g, kind, cfg) for g in (s, t)]
    if kind == "names" and cfg.features.encoder:  # the names both graphs hold encoded once
        both = features.sentence_vectors(inputs[0].texts + inputs[1].texts)
        inputs = [replace(inputs[0], vectors=both[:len(inputs[0].texts)]),
                  replace(inputs[1], vectors=both[len(inputs[0].texts):])]
    content = Content.of(kind, [content_counts(kind, x) for x in inputs]
                         if counted(kind, cfg) else [])
    return tuple(content_rows(content, x, cfg, features.node_named(g))
                 for x, g in zip(inputs, (s, t)))


def operators(pair: Pair, cfg: Config) -> tuple[Operator, Operator]:
    """The graph operators :math:`\\hat{A}_s, \\hat{A}_t` of ``cfg.embed``.

    Where a graph knows its relations (:attr:`Graph.roles`, a knowledge graph's triples) and
    ``cfg.embed.relations``, each relation role is one more node of the operator, numbered
    after the graph's nodes and joined to every node that plays it. A message then passes
    from a triple's head through its relation's head role to every other head of the
    relation: nodes are told apart by the relations they take part in, and through the
    anchors a relation is described by the seeds that take part in it, alike in both graphs
    whatever the relations are called (DBP15k without names, 30 % seeds: zh 70.2 -> 79.5).
    The roles have no input rows (zeros) and no output rows (:func:`embeddings`); the
    refinement propagates over the edges alone (:func:`edge_operators`)."""
    ec, out = cfg.embed, []
    for g in (pair.source, pair.target):
        edges, weight, n = g.edge_index, g.edge_weight, g.num_nodes
        if ec.relations and g.num_roles:
            edges, weight = with_roles(edges, weight, n, g.roles)
            n += g.num_roles
        out.append(graph_operator(edges, n, ec.operator, self_loops=ec.self_loops,
                                  edge_weight=weight))
    return out[0], out[1]


def channels(pair: Pair, cfg: Config) -> list[features.Channel]:
    """The channels both graphs are embedded from.

    The content channel ``X``; with seeds, its seed pairs tied (:func:`features.tie_seeds`,
    the paper's feature swap in one channel; a degree encoding is left as it is: it
    describes a node's own structure, not its content). When ``cfg.anchors.enabled``, the
    anchor channel (:func:`features.anchors`) of the seeds and the hints at weight
    ``cfg.anchors.weight``, propagated without its input block (a seed's own indicator says
    nothing about the other nodes), where ``cfg.anchors.restart`` is set first spread by a
    random walk with restart (:func:`features.walked`). Hints are guesses and are not
    tied: that would make their own rows certain (measured on DBP15k zh_en without seeds
    with the two-channel swap: 92.9 both ways, at twice the content width). When
    ``cfg.structure.enabled`` (names or vectors), the structure channel between them: the
    content, projected to ``cfg.structure.dim``, propagated through the featureless
    setting's deep layers.
    """
    x_s, x_t = input_features(pair, cfg)
    kind = feature_kind(pair, cfg)
    if pair.seeds is not None and not kind.startswith("degree"):
        x_s, x_t = features.tie_seeds(x_s, x_t, *(torch.from_numpy(a) for a in pair.seeds))
    out = content_channels(kind, x_s, x_t, cfg, has_structure(pair, cfg))
    anchored, ac = pair.anchored(), cfg.anchors
    if ac.enabled and anchored is not None:
        a_s, a_t = features.anchors(pair.source.num_nodes, pair.target.num_nodes,
                                    *(torch.from_numpy(a) for a in anchored), ac.dim, cfg.seed)
        if ac.restart > 0:
            a_s, a_t = (features.walked(a, g.edge_index, g.num_nodes, ac.restart)
                        for a, g in ((a_s, pair.source), (a_t, pair.target)))
        spec = replace(cfg.embed, layers=ac.layers, include_input=False, bias=0.0, basic=False)
        out.append(features.Channel("anchors", a_s, a_t, spec, ac.weight))
    return out


def content_channels(kind: str, x_s: torch.Tensor, x_t: torch.Tensor, cfg: Config,
                     structure: bool) -> list[features.Channel]:
    """The content channel of ``X_s, X_t`` and, with ``structure``, the structure channel:
    the content projected to ``cfg.structure.dim``, each row alone (so a part of a run on
    Ray makes its rows of both channels from its rows of the content)."""
    out = [features.Channel(kind, x_s, x_t, cfg.embed)]
    sc = cfg.structure
    if structure:
        if sc.dim < x_s.size(1):
            x_s, x_t = features.random_projection([x_s, x_t], sc.dim, cfg.seed)
        spec = replace(cfg.embed, layers=sc.layers, bias=sc.bias, include_input=False,
                       basic=False)
        out.append(features.Channel("structure", x_s, x_t, spec, sc.weight))
    return out


def has_structure(pair: Pair, cfg: Config) -> bool:
    """Whether :func:`channels` adds the structure channel: when enabled, to names or
    vectors (a degree encoding already is structure)."""
    return cfg.structure.enabled and not feature_kind(pair, cfg).startswith("degree")


def scale(chans: list[features.Channel]) -> float:
    """The largest score a pair of embeddings of ``chans`` can have."""
    return sum(c.scale for c in chans)


def device(cfg: Config) -> torch.device:
    """Where one process embeds, searches and refines: ``cfg.device``, ``auto`` being the
    first CUDA GPU that torch sees, else the CPU."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise InputError("device = cuda, but torch sees no CUDA GPU on this host "
                         f"(torch {torch.__version__}); set device = cpu or auto")
    cuda = cfg.device == "cuda" or cfg.device == "auto" and torch.cuda.is_available()
    return torch.device("cuda" if cuda else "cpu")


def embeddings(chans: list[features.Channel], ops: tuple[Operator, Operator], seed: int,
               on: torch.device = torch.device("cpu")) -> tuple[torch.Tensor, torch.Tensor]:
    """Single-process TFGM embeddings ``O_s, O_t`` (on the CPU, computed ``on`` a device):
    every channel's, each block scaled by the root of the channel's weight times the
    block's (:attr:`EmbedConfig.block_weights`), concatenated."""
    params = [[q.to(on) for q in layer_params(c.embed, c.x_s.size(1), seed)] for c in chans]
    width = sum(c.embed.num_blocks * c.x_s.size(1) for c in chans)
    out = []
    for g, (op, n) in enumerate(zip(ops, (chans[0].x_s.size(0), chans[0].x_t.size(0)))):
        # the graph's rows of the operator; the relation roles after them, if any, are rows
        # of no output, added up from every node's share
        nodes = torch.arange(n)
        block = row_block(op, nodes).to(on)
        roles = None if op.num_nodes == n else role_share(op, n, nodes).to(on)
        o, at = torch.empty(n, width, device=on), 0
        for c, p in zip(chans, params):
            x = (c.x_s, c.x_t)[g].to(on)
            for b, w in zip(embed_blocks(x, block, c.embed, p, roles), c.embed.block_weights):
                torch.mul(b, math.sqrt(c.weight * w), out=o[:, at:at + b.size(1)])
                at += b.size(1)
        out.append(o.cpu())
    return out[0], out[1]


def _searchable(n: int, restrict: np.ndarray | None, excluded: np.ndarray | None) -> np.ndarray:
    keep = np.zeros(n, dtype=bool)
    keep[np.arange(n) if restrict is None else restrict] = True
    if excluded is not None:
        keep[excluded] = False
    return np.flatnonzero(keep)


@dataclass(frozen=True)
class Plan:
    """Which node numbers each search covers."""

    rows: np.ndarray  # source numbers that are output (queries minus seed sources)
    targets: np.ndarray  # targets searched among (candidates minus seed targets)
    sources: np.ndarray | None  # sources the backward search ranks among; None: no backward

    @property
    def searched(self) -> np.ndarray:
        """The sources the forward search ranks: with a backward search the same sources
        (every one but the seeds), else the output rows."""
        return self.rows if self.sources is None else self.sources


def plan(pair: Pair, cfg: Config) -> Plan:
    """The searches ``cfg`` needs on ``pair``; refinement and mutual need both directions."""
    seeds_s, seeds_t = pair.seeds if pair.seeds is not None else (None, None)
    n_s = pair.source.num_nodes
    targets = _searchable(pair.target.num_nodes, pair.candidates, seeds_t)
    if targets.size == 0:
        raise InputError("no target is left to search: the seeds cover every target node "
                         "(or every one of the candidates)")
    rows = _searchable(n_s, pair.queries, seeds_s)
    if rows.size == 0:
        raise InputError("no source is left to align: the seeds cover every source node "
                         "(or every one of the queries)")
    if cfg.refine.enabled or cfg.assign.method == "mutual":
        # a seed's own list is never read: refinement pins it to its target
        return Plan(rows, targets, _searchable(n_s, None, seeds_s))
    return Plan(rows, targets, None)


def search_options(cfg: Config) -> dict:
    """The FAISS index options of ``cfg.search``, as :func:`search.build_index` takes them."""
    sc = cfg.search
    return dict(kind=sc.index, nlist=sc.nlist or None, nprobe=sc.nprobe, hnsw_m=sc.hnsw_m,
                ef_search=sc.ef_search, seed=cfg.seed)


@dataclass
class Scored:
    """Ranked candidates of a pair, before decoding."""

    forward: Candidates  # [n_s, k] source -> target lists (empty rows where not searched)
    backward: Candidates | None  # [n_t, k] target -> source lists, when refined or mutual
    rows: torch.Tensor  # source numbers that are output
    targets: np.ndarray  # target numbers that were searched
    num_targets: int
    o_s: torch.Tensor | None  # embeddings, for a dense Hungarian on small graphs
    o_t: torch.Tensor | None
    scale: float = 1.0  # the largest possible score (see :func:`scale`)
    refined: bool = False
    search: dict = field(default_factory=dict)  # per direction, the tuned nprobe and recall


@dataclass
class Result:
    """What the pipeline decided, in node numbers."""

    rows: torch.Tensor  # [n] source numbers that are output
    candidates: Candidates  # ranked target lists for ``rows``
    matched: torch.Tensor  # [n] decoded target per row, -1 when none
    matched_score: torch.Tensor  # [n] its score
    metrics: dict = field(default_factory=dict)
    scale: float = 1.0  # the largest possible score
    mutual: torch.Tensor | None = None  # [n] the match is its target's best source too
    confidence: torch.Tensor | None = None  # [n] in [0, 1], NaN where unmatched

    def take_rows(self, at: torch.Tensor) -> "Result":
        """The result of the rows ``at`` (a mask or positions), without its metrics."""
        return replace(self, rows=self.rows[at], candidates=self.candidates.take_rows(at),
                       matched=self.matched[at], matched_score=self.matched_score[at],
                       mutual=None if self.mutual is None else self.mutual[at],
                       confidence=None if self.confidence is None else self.confidence[at],
                       metrics={})


def score(pair: Pair, cfg: Config, watch: Stopwatch | None = None) -> Scored:
    """Run the features, embed, search and (optionally) refine stages on a loaded pair."""
    watch = watch or Stopwatch()
    with watch.stage("features"):
        chans = channels(pair, cfg)
    on = device(cfg)
    with watch.stage("embed"):
        ops = operators(pair, cfg)
        o_s, o_t = embeddings(chans, ops, cfg.seed, on)
    p, k = plan(pair, cfg), cfg.search.k
    opts = {**search_options(cfg), "recall": cfg.search.recall}
    with watch.stage("search"):
        searches, backward = {}, None
        a_s, a_t = o_s.numpy(), o_t.numpy()
        if on_device(cfg.search.index, on) or (
                p.sources is not None and cfg.search.index == "flat" and not gpu_available()
                and both_ways_pays(o_t.size(1), k)):
            forward, backward = both_ways(taken(a_s, p.searched), taken(a_t, p.targets), k,
                                          ids_s=p.sources, ids_t=p.targets, device=on)
        else:
            forward, searches["forward"] = top_k(taken(a_s, p.searched), a_t, k,
                                                 candidates=p.targets, **opts)
            if p.sources is not None:
                backward, searches["backward"] = top_k(taken(a_t, p.targets), a_s, k,
                                                       candidates=p.sources, **opts)
        forward = forward.scatter_rows(torch.from_numpy(p.searched), pair.source.num_nodes)
        if backward is not None:
            backward = backward.scatter_rows(torch.from_numpy(p.targets), pair.target.num_nodes)
    scored = Scored(forward, backward, torch.from_numpy(p.rows), p.targets,
                    pair.target.num_nodes, o_s, o_t, scale=scale(chans),
                    search={d: t for d, t in searches.items() if t})
    return refined(pair, cfg, scored, ops, watch)


def edge_operators(pair: Pair, cfg: Config) -> tuple[Operator, Operator]:
    """:func:`operators` over the graphs' edges alone, without relation roles: the
    refinement's. At its one layer the roles, which draw no indicator of their own, would add
    nothing (DBP15k without names, with seeds: the same Hits@1 to every digit, zh 79.46, fr
    83.05)."""
    return operators(pair, replace(cfg, embed=replace(cfg.embed, relations=False)))


def consensus_psi(cfg: Config) -> EmbedConfig:
    """The weight-free :math:`\\psi_2` of the refinement: its own depth and input block,
    the embedding's operator over the graphs' edges alone (:func:`edge_operators`)."""
    rc = cfg.refine
    return EmbedConfig(layers=rc.layers, operator=cfg.embed.operator,
                       self_loops=cfg.embed.self_loops, include_input=rc.include_input,
                       relations=False)


def refined(pair: Pair, cfg: Config, scored: Scored, ops: tuple[Operator, Operator],
            watch: Stopwatch) -> Scored:
    """``scored`` after the training-free consensus in both directions, when enabled; over
    the graphs' edges alone where ``ops`` (the embedding's) hold relation roles."""
    if not cfg.refine.enabled:
        return scored
    with watch.stage("refine"):
        if any(op.num_nodes > g.num_nodes for op, g in zip(ops, (pair.source, pair.target))):
            ops = edge_operators(pair, cfg)
        rc, psi = cfg.refine, consensus_psi(cfg)
        fixed = None if pair.seeds is None else tuple(torch.from_numpy(a) for a in pair.seeds)
        block_s, block_t = whole(ops[0]), whole(ops[1])
        common = dict(steps=rc.steps, dim=rc.dim, psi=psi, scale=scored.scale, seed=cfg.seed,
                      device=device(cfg))
        fwd = refine(scored.forward, block_s, block_t, fixed=fixed, **common)
        bwd = refine(scored.backward, block_t, block_s,
                     fixed=None if fixed is None else (fixed[1], fixed[0]), **common)
    return replace(scored, forward=merge(fwd, bwd, cfg.search.k),
                   backward=merge(bwd, fwd, cfg.search.k), refined=True)


def decodes_on_scores(cfg: Config) -> bool:
    """Whether a one-to-one decoding of refined lists weighs the TFGM score
    (:func:`~tfgm_dist.refine.decoding`): it reads the embeddings too."""
    return (cfg.refine.enabled and cfg.assign.method == "one-to-one"
            and cfg.assign.score_weight > 0)


NO_GOLD_ASKED = ("no gold pair has its source among the output rows (all are seeds or "
                 "outside the queries)")


def conclude(pair: Pair, scored: Scored, cfg: Config, watch: Stopwatch,
             decoded: tuple[torch.Tensor, torch.Tensor] | None = None) -> Result:
    """The assign stage, and the metrics when gold pairs are given. ``decoded``: the
    matches and scores of ``cfg.assign``'s decoding where they were made already (the
    one-to-one matching that the polish then moves)."""
    with watch.stage("assign"):
        matched, match_score = decoded or assign.decode(scored, cfg.assign)
        if cfg.assign.polish and cfg.assign.method == "one-to-one":
            matched, match_score = polished(pair, scored, matched)
    lists = scored.forward.take_rows(scored.rows)
    if scored.backward is not None:
        targets, sources = torch.arange(scored.num_targets), assign.argmax(scored.backward)
    else:
        targets, sources, _ = assign.listing_best(lists, scored.rows)
    mutual = assign.is_best_source(matched, scored.rows, targets, sources, scored.num_targets)
    # refined scores are two softmax probabilities summed (refine.merge), at most 2
    result = Result(scored.rows, lists, matched, match_score,
                    scale=2.0 if scored.refined else scored.scale, mutual=mutual)
    if pair.gold is not None:
        result.metrics = evaluate(result.candidates, scored.rows, matched, pair.gold)
        if not result.metrics["evaluated"]:
            raise InputError(NO_GOLD_ASKED)
    if scored.search:
        result.metrics["search"] = scored.search
    return result


def polished(pair: Pair, scored: Scored, matched: torch.Tensor
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`assign.polish` of the decoded ``matched``, the seeds fixed, and each row's
    score at its new target: its candidate's, else what a dense decoding would give it (0
    when refined, the embeddings' product otherwise; ``-inf``, the least confident, where
    the embeddings were not gathered). A target that was not searched (``--candidates``)
    leaves its row unmatched."""
    moved = assign.polish(matched, scored.rows, pair.source, pair.target, pair.seeds)
    allowed = torch.zeros(scored.num_targets, dtype=torch.bool)
    allowed[torch.from_numpy(scored.targets)] = True
    moved = torch.where((moved >= 0) & allowed[moved.clamp(min=0)], moved, -1)
    c = scored.forward.take_rows(scored.rows)
    on_list = c.index == moved[:, None]
    listed = assign.listed_score(c, moved)
    if scored.refined:
        off_list = torch.zeros_like(listed)
    elif scored.o_s is not None:
        off_list = (scored.o_s[scored.rows] * scored.o_t[moved.clamp(min=0)]).sum(1)
    else:
        off_list = torch.full_like(listed, -torch.inf)
    score = torch.where(on_list.any(1), listed, off_list)
    return moved, torch.where(moved >= 0, score, -torch.inf)


def align(pair: Pair, cfg: Config, watch: Stopwatch | None = None) -> Result:
    """Run every stage but load and write on a loaded pair; metrics when gold is given."""
    watch = watch or Stopwatch()
    return conclude(pair, score(pair, cfg, watch), cfg, watch)


def evaluate(candidates: Candidates, rows: torch.Tensor, matched: torch.Tensor,
             gold: tuple[np.ndarray, np.ndarray]) -> dict:
    """Hits@1/10 and MRR of the lists as written, the decoded match first
    (:func:`metrics.ranking_metrics`), and accuracy of the decoded matching: ``candidates``
    and ``matched`` are those of the source numbers ``rows`` (ascending).

    Only gold pairs whose source is one of ``rows`` count: seed pairs are known, not
    predicted, and sources outside ``--queries`` were not asked for. ``{"evaluated": 0}``
    when there is none (a Ray part may hold no gold source; :func:`metrics.combined` joins
    the parts' evaluations).
    """
    at = np.searchsorted(rows.numpy(), gold[0]).clip(max=max(rows.numel() - 1, 0))
    asked = (rows.numpy()[at] == gold[0]) if rows.numel() else np.zeros(gold[0].size, bool)
    if not asked.any():
        return {"evaluated": 0}
    local, gold_t = at[asked], gold[1][asked]
    out = metrics.ranking_metrics(candidates, local, gold_t, first=matched)
    out["accuracy"] = metrics.accuracy(matched, local, gold_t)
    return out
