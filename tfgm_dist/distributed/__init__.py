"""The pipeline on Ray: partitioned embedding actors, sharded FAISS search, workers that write.

The driver holds the pair's ids, the loader's counts and object references; everything that
grows with the graphs' edges runs in Ray workers:

- **load**: a Parquet layout is read in shares of its row groups, a task per share on the
  driver's node, where its files are; the driver numbers the nodes from the ids the shares
  met (or ``nodes.parquet``'s) and tasks cut the numbered edges into a block per part
  (:mod:`tfgm_dist.load.shares`, :func:`loaded`); a large edge list likewise in byte
  ranges, another text file by one task. The
  edges, weights and relation roles stay in the object store, and the driver keeps their
  references (:class:`~tfgm_dist.graph.Held`). A pair given in memory is put there first
  (:func:`held_pair`). Every task that needs a whole graph reads them back
  (:func:`~.actors.whole_graph`).
- **partition**: a task per graph partitions it, streaming over its blocks by default
  (:func:`~.actors.parted`); a task per block cuts it by part
  (:func:`~.actors.split_block`), a task per part joins its pieces, the edges that touch
  the part (:func:`~.actors.part_of_graph`), and a task per graph plans the parts' halo
  from what they found (:func:`~.actors.exchanged`). The driver receives the partition
  (two integers a node), who sends to whom, the cut, and for the degree encoding every
  node's degree; no process holds a whole graph's edges unless METIS or RCM is asked for
  (``ray.partitioner``).

- **prepare**: the automatic choices' passes (with seeds the held-out folds, without them a
  bootstrapping pass) run in one task on the largest node (:func:`prepare`), which holds
  the whole pair as one process does; the driver receives the hints, the settings and the
  calibration.
- **features**: without seeds or hints, each part actor reads its own nodes' names or
  vectors (a Parquet layout's are left in ``nodes.parquet`` until then,
  :attr:`Graph.content`) and makes its input rows (:class:`~.actors.PartRecipe`); the
  driver only adds up the parts' n-gram counts for the names' IDF (or whether every part's
  vectors are counts, to be square-rooted). With seeds or hints the channels tie rows
  across the graphs: one task makes them from the whole pair and puts each part's rows.
- **embed**: both graphs' nodes are split into P parts (:mod:`tfgm_dist.partition`). Actor
  ``p`` builds part ``p``'s row blocks of both operators from the edges that touch it
  (:meth:`~.halo.GraphPart.block`) and, layer by layer, computes its rows
  of :math:`F_l` from the previous layer's rows of its 1-hop halo: its own, and from each
  other part the slice of that part's rows in its halo, which that part returns as a separate
  object (:func:`~.halo.exchange` plans who sends which rows to whom). A knowledge
  graph's relation roles are rows of every layer too, each a sum over all parts: each part
  sends its share of them, and one task adds them up (:func:`~.actors.role_rows`) for the
  next layer. Where the nodes cannot hold every actor at its estimated memory, only as
  many compute a layer at once (:meth:`Run._propagate`).
- **search**: actor ``p`` is also the FAISS shard of its part's rows. Every part's query rows
  go through every shard, and each query part's own actor merges the per-shard top-k.
- **refine**: each part refines the lists of its rows, both directions
  (:mod:`.consensus`): the indicators' :math:`S^\\top r_s` is summed where the targets
  are, :math:`\\psi_2` is the embedding's halo exchange, and each part is served the rows
  of :math:`o_t` its lists name; then each part merges its rows' lists with the other
  direction's entries that name them.
- **assign**: the sparse one-to-one auction runs on the part actors (:func:`one_to_one`):
  each bids for its sources and sells its targets, and concludes its rows. Otherwise (the
  dense Hungarian, mutual or argmax decoding, the polish, bootstrapping) one task runs
  the single-process refine and assign on the merged candidates, and returns the result
  cut into the source parts.
- **write**: one task per source part writes its rows as one file of the Parquet dataset.

An actor keeps nothing it cannot rebuild: each method's result depends only on the
constructor's and its own arguments, and the FAISS indexes are caches. Ray restarts a killed
actor, retries its calls, and the run produces the same output. When a node is lost, calls
to its actors fail before Ray has restarted them; the driver then runs embed to assign again
on fresh actors (everything is deterministic, so the output is the same). The decided parts
are kept beside the output (:mod:`tfgm_dist.checkpoint`) until it is committed.

:class:`ShardedIndex` is the same sharded search on its own (the supervised kNN uses it).

This module is the driver's side (:class:`Run`); the actors and tasks are in :mod:`.actors`,
the pure halo planner in :mod:`.halo`, joining or starting a cluster and sizing the actors in
:mod:`.cluster`.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Generator

import numpy as np
import pyarrow as pa
import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .. import auto, checkpoint, estimate, metrics, write
from ..assign import AUCTION_EPS, auction, dense_assignment, spanning
from ..auto import Prepared
from ..config import Config, EmbedConfig, column_names
from ..embed import LayerParams, layer_params
from ..errors import InputError, JobError
from ..features import Channel
from ..graph import Graph, Held
from ..load import shares
from ..load.formats import guess_format
from ..load.ids import only_self_loops, uri_names
from ..load.tables import NodeContent, no_data_lines
from ..partition import Partition
from ..pipeline import (NO_GOLD_ASKED, Content, Pair, Plan, consensus_psi, content_channels,
                        content_kind, counted, decodes_on_scores, has_structure, ordered, plan,
                        scale, search_options)
from ..search import IVF_KINDS, probe_rows, training_rows, tune_nprobe
from ..stopwatch import Progress, Stopwatch
from .actors import (RESTARTS, LostState, PartRecipe, PartWorker, ShardedIndex,
                     anchored_inputs, apart, bare, exchanged, finish, gathered_embedding,
                     join_block, line_count, load_held, number_share, parted, part_counts,
                     part_of_graph, prepare_whole, read_share, read_text_share, role_rows,
                     split_block, usage_of, write_part)
from .cluster import (RESTART_HEADROOM, connect, fitted_memory, node_memory, placed, placement,
                      resources)
from .halo import halo_plans

__all__ = ["Events", "RESTART_HEADROOM", "Run", "ShardedIndex", "connect", "halo_plans",
           "held_pair", "loaded", "one_to_one", "placement", "prepare"]

log = logging.getLogger("tfgm_dist")

# Query rows a search call takes: 1M queries on 2 parts searched in 2 calls had left the
# job's log without a progress line for 107 s; in 16 the log reports every few seconds.
SEARCH_CHUNK = 1 << 16

Events = Callable[[str, dict], None]  # hears of each layer and search part as submitted
# Failures of the cluster, not of the input: a run that meets one is run again.
LOST = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
        ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
        ray.exceptions.LocalRayletDiedError, LostState)


def _cause(error: Exception) -> Exception:
    """The innermost cause of a task error (a task fails when one of its inputs failed)."""
    while isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None \
            and error.cause is not error:
        error = error.cause
    return error


def _raised(error: Exception) -> str:
    """The exception line that ends a worker's traceback quoted in ``error``'s message (Ray's
    :class:`~ray.exceptions.ActorDiedError` keeps only the text of its creation task's)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _got(refs: list[ray.ObjectRef]) -> list:
    """``ray.get(refs)``, a task's :class:`InputError` raised as itself (a bad value the
    input's parts found as they read it), not inside Ray's error."""
    try:
        return ray.get(refs)
    except ray.exceptions.RayTaskError as e:
        cause = _cause(e)
        if isinstance(cause, InputError):
            raise cause from None
        raise


def _flat(per_part: list[list]) -> list:
    return [x for part in per_part for x in part]


def _completed(refs: list[ray.ObjectRef], stage: str, unit: str) -> None:
    """Wait for ``refs`` one by one as they complete, reporting the share done
    (:class:`Progress`). The objects stay where they are (``fetch_local=False``): the driver
    only learns that they exist."""
    meter, pending = Progress(stage, len(refs), unit), list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, fetch_local=False)
        meter.advance(len(ready))


ROUNDS_ON_PARTS = 100  # auction rounds on the parts before a long auction is handed over
# Candidate entries that actor 0 may take over (about 32 bytes each in Bidders: 640 MB)
HANDOVER_ENTRIES = 20_000_000


def one_to_one(workers: list[ray.actor.ActorHandle], chunks: list[list[ray.ObjectRef]],
               rows: list[list[np.ndarray]], num_targets: int, home: np.ndarray,
               events: Events | None = None) -> int:
    """The sparse one-to-one auction (:func:`~tfgm_dist.assign.sparse_one_to_one`) over
    :class:`~.actors.AuctionSide` actors; returns the number of rounds, and each actor
    holds its sources' targets (``matched``).

    Actor ``q`` bids for the sources ``rows[q]`` (ascending, in chunks) whose candidate
    lists are ``chunks[q]``, and sells the targets ``t`` with ``home[t] == q``. A round is
    two calls per part: each sends each part the bids for its targets, each returns each
    part the outcome (won bids, unseated sources, new prices); the driver only hears how
    many sources were free. The rounds are :func:`~tfgm_dist.assign.auction`'s and every
    step the same code as in one process, so the matching is one process's, bit for bit;
    except where sources that share a list (which bid together) fall in several parts and
    the auction ends on the parts: each part's then bid as a group of their own, for a
    matching within the same bound, but the parts' groups vie for the same targets a price
    step a round (100 lists each shared by 1-24 sources, in three parts: 9,859 rounds,
    against 2 in one process), so a long auction is best handed over (below).

    A round costs 9-12 ms at P = 2 on 2 cores, mostly the chained calls (an empty two-stage
    chain between two actors: 4.4 ms), against 0.5-2 ms in one process. Real lists end in a
    few rounds (DBP15k 9-21, the 1M pair 4); tied ones can take thousands (10,000 rounds:
    1.5 minutes). So after :data:`ROUNDS_ON_PARTS` rounds, if all lists hold at most
    :data:`HANDOVER_ENTRIES` entries, actor 0 runs the auction again on all of them as one
    process does (:func:`~tfgm_dist.assign.auctioned`: the same matching, at 0.5-2 ms a
    round) and hands each part its sources' targets. Returns the rounds run in all."""
    w, P, events = workers, len(workers), events or (lambda event, info: None)
    span = spanning(ray.get([w[q].span.remote(*chunks[q]) for q in range(P)]))
    owner = ray.put(home)
    ray.get([w[q].bidders.remote(np.concatenate(rows[q]), num_targets, span, owner, P,
                                 *chunks[q]) for q in range(P)]
            + [w[p].sellers.remote(np.flatnonzero(home == p)) for p in range(P)])
    outcome: list[list[ray.ObjectRef]] = [[] for _ in range(P)]
    bids: list[list[ray.ObjectRef]] = []
    rounds = [0]

    def bid(eps: float) -> int:
        rounds[0] += 1
        events("assign-round", {"round": rounds[0], "workers": w})
        out = [w[q].bid.options(num_returns=P + 1).remote(eps, *outcome[q]) for q in range(P)]
        bids[:] = [o[1:] for o in out]
        return sum(ray.get([o[0] for o in out]))

    def resolve() -> None:
        res = [w[p].resolve.options(num_returns=P).remote(*[bids[q][p] for q in range(P)])
               for p in range(P)]
        res = [[r] if P == 1 else r for r in res]
        outcome[:] = [[res[p][q] for p in range(P)] for q in range(P)]

    size = sum(r.size for part in rows for r in part)
    done, eps, finished = auction(bid, resolve, AUCTION_EPS, size, stop=ROUNDS_ON_PARTS)
    if finished:
        return done
    if sum(ray.get([x.entries.remote() for x in w])) > HANDOVER_ENTRIES:
        return auction(bid, resolve, eps, size, rounds=done)[0]
    out = w[0].finish.options(num_returns=P + 1).remote(
        num_targets, P, *[np.concatenate(r) for r in rows],
        *[ref for c in chunks for ref in c])
    ray.get([w[q].adopt.remote(out[1 + q]) for q in range(P)])
    return done + ray.get(out[0])


def loaded(source: str | Path, target: str | Path, *, cfg: Config, fmt: str | None,
           usage: list[dict]) -> tuple[Graph, Graph]:
    """Both graphs of a pair loaded and :func:`~tfgm_dist.pipeline.ordered` by workers, the
    two at once: the driver receives their ids, names read from URIs and counts, and the
    references of their edges, weights and roles (:class:`~tfgm_dist.graph.Held`), never
    the edges. A Parquet layout is read in shares of its row groups, as many as the run's
    parts (:func:`_in_shares`), an edge list in byte ranges where it is large enough
    (:func:`_in_text_shares`); another text file by one task on this node, where the driver
    fetched it (:func:`~.actors.load_held`). The tasks' usage is added to ``usage``."""
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    steps = [_loading(Path(path), fmt or guess_format(Path(path)), cfg, is_target, here)
             for is_target, path in ((False, source), (True, target))]
    done: list[tuple[Graph, list[dict]] | None] = [None, None]
    while None in done:  # each graph's next round submitted before either's is awaited
        for i, step in enumerate(steps):
            if done[i] is None:
                try:
                    next(step)
                except StopIteration as finished:
                    done[i] = finished.value
    for _, used in done:
        usage.extend(used)
    return tuple(graph for graph, _ in done)


Loading = Generator[None, None, tuple[Graph, list[dict]]]  # yields when a round is submitted


def _loading(path: Path, fmt: str, cfg: Config, is_target: bool,
             here: NodeAffinitySchedulingStrategy) -> Loading:
    """How one graph is loaded: :func:`_in_shares`, :func:`_in_text_shares` or
    :func:`_in_one_task`."""
    if fmt == "parquet":
        return _in_shares(path, cfg, is_target, here)
    text = shares.text_plan(path, max(1, cfg.ray.partitions)) if fmt == "edgelist" else None
    if text is not None:
        return _in_text_shares(text, cfg, is_target, here)
    return _in_one_task(str(path), fmt, cfg, is_target, here)


def _in_one_task(path: str, fmt: str | None, cfg: Config, is_target: bool,
                 here: NodeAffinitySchedulingStrategy) -> Loading:
    """One graph loaded in one task (:func:`~.actors.load_held`), its arrays an object each."""
    # no core asked: the driver's node may offer none (a KubeRay head, cluster/kuberay)
    out = load_held.options(num_cpus=0, scheduling_strategy=here).remote(path, fmt, cfg,
                                                                         is_target)
    yield
    (graph, used), = _got([out[0]])
    return replace(graph, held=replace(graph.held, edges=[out[1]], weights=[out[2]],
                                       roles=[out[3]])), [used]


def _in_shares(path: Path, cfg: Config, is_target: bool,
               here: NodeAffinitySchedulingStrategy) -> Loading:
    """A Parquet layout loaded as :mod:`tfgm_dist.load.shares` says, its edges cut into as
    many blocks as the run has parts: here, its footers and ``nodes.parquet``'s ids
    (:func:`~tfgm_dist.load.shares.plan`); on this node, where its files are, a task per
    share reading the rows (:func:`~.actors.read_share`); then :func:`_numbered`."""
    name, blocks = "target" if is_target else "source", max(1, cfg.ray.partitions)
    layout = shares.plan(path, column_names(cfg.job.columns), blocks)
    listed = layout.node_ids
    light = ray.put(replace(layout, files=replace(layout.files, nodes=None)))
    reads = [read_share.options(num_cpus=0, scheduling_strategy=here).remote(
        light, share, f"load {name} share {i}") for i, share in enumerate(layout.shares)]
    yield
    met, rows, used = zip(*_got([r[0] for r in reads]))
    ids = shares.met_ids([i for i, _ in met], layout.files.edges_path) if listed is None \
        else listed
    files = layout.files
    at = [(files.edges_path, share.offset, files.nodes_path) for share in layout.shares]
    return (yield from _numbered(path, ids, shares.relations_of([r for _, r in met]),
                                 files.content, [r[1] for r in reads], at, sum(rows), used,
                                 cfg, is_target))


def _in_text_shares(plan: shares.TextPlan, cfg: Config, is_target: bool,
                    here: NodeAffinitySchedulingStrategy) -> Loading:
    """A text edge list loaded in the byte ranges of ``plan``
    (:func:`~tfgm_dist.load.shares.text_plan`): on this node, where the file is, a task per
    range counting its lines (:func:`~.actors.line_count`), then one reading them
    (:func:`~.actors.read_text_share`), each told its first line's number; then
    :func:`_numbered`, the ids integers where every range's are."""
    name, path = "target" if is_target else "source", plan.path
    counts = [line_count.options(num_cpus=0, scheduling_strategy=here).remote(str(path), *r)
              for r in plan.ranges]
    yield
    first = 1 + np.concatenate([[0], np.cumsum(_got(counts))[:-1]])
    reads = [read_text_share.options(num_cpus=0, scheduling_strategy=here).remote(
        plan, r, int(first[r]), f"load {name} share {r}") for r in range(len(plan.ranges))]
    yield
    met, integers, rows, used = zip(*_got([r[0] for r in reads]))
    if not sum(rows):
        raise InputError(no_data_lines(path))
    return (yield from _numbered(path, shares.text_ids(met, integers), None, None,
                                 [r[1] for r in reads], [(path, 0, path)] * len(reads),
                                 sum(rows), used, cfg, is_target))


def _numbered(path: Path, ids: pa.Array, relations: pa.Array | None,
              content: NodeContent | None, reads: list[ray.ObjectRef],
              at: list[tuple[Path, int, Path]], rows: int, used: tuple[dict, ...],
              cfg: Config, is_target: bool) -> Loading:
    """The graph of the shares' edge rows ``reads`` (``rows`` in all; ``at``: where each
    share's rows are, for errors, :func:`~tfgm_dist.load.shares.numbered`) and their
    distinct ``ids``: the driver numbers the nodes as one process does; anywhere, a task per
    share numbers its rows (:func:`~.actors.number_share`) and one per block joins the
    shares' pieces of it (:func:`~.actors.join_block`)."""
    name, blocks = "target" if is_target else "source", max(1, cfg.ray.partitions)
    graph = ordered(Graph(ids, torch.zeros(2, 0, dtype=torch.long), source=str(path),
                          content=content), cfg, is_target)
    numbered_by = ray.put(graph.ids)
    numbers = [number_share.options(num_returns=1 + blocks).remote(
        r, *where, numbered_by, relations, blocks) for r, where in zip(reads, at)]
    joins = [join_block.options(num_returns=4).remote(
        graph.num_nodes, f"load {name} block {b}", *(n[1 + b] for n in numbers))
        for b in range(blocks)]
    yield
    loops = sum(_got([n[0] for n in numbers]))
    kept, dropped, block_usage = zip(*_got([j[0] for j in joins]))
    if loops == rows:
        raise only_self_loops(str(path))
    names = uri_names(graph.ids) if content is None else None
    graph = replace(graph, names=names, names_from_ids=names is not None,
                    stats={"input_edges": rows, "self_loops": loops,
                           "duplicate_edges": sum(dropped)})
    held = Held([j[1] for j in joins], [j[2] for j in joins], [j[3] for j in joins],
                sum(kept), 0 if relations is None else 2 * len(relations))
    return replace(graph, held=held), [*used, *block_usage]


def held_pair(pair: Pair) -> Pair:
    """``pair`` with the edges, weights and roles of a graph that holds them here put into
    the object store (:func:`~.actors.bare`); a graph :func:`loaded` is held already."""
    def held(g: Graph) -> Graph:
        if g.held is not None:
            return g
        return bare(g, *([ray.put(None if t is None else t.numpy())]
                         for t in (g.edge_index, g.edge_weight, g.roles)))

    return replace(pair, source=held(pair.source), target=held(pair.target))


def _largest_node_cpus() -> float:
    """The cores of the cluster's largest live node: a task that holds the whole pair (the
    held-out passes, the finishing refine and assign) takes them all."""
    return max(node["Resources"].get("CPU", 1) for node in ray.nodes() if node["Alive"])


def prepare(pair: Pair, cfg: Config, watch: Stopwatch
            ) -> tuple[Pair, Config, Prepared, list[dict]]:
    """:func:`tfgm_dist.auto.prepare` for a run on Ray, and the usage of the task it ran in.

    Where it runs passes of the pipeline (held-out folds with seeds, a bootstrapping pass
    without), they run in one task on the largest node (:func:`~.actors.prepare_whole`),
    not in the driver: a seeded pass holds the whole pair's content, channels, embeddings
    and candidate lists, and the driver only receives the seeds and hints of the final
    pass, the settings and what the output is finished with. The task's stage seconds are
    added to ``watch``."""
    settled, report = auto.checked_settle(pair, cfg)
    if not auto.passes(pair, settled):
        return pair, settled, Prepared(report), []
    cpus = _largest_node_cpus()
    log.info("auto: the held-out and bootstrapping passes run in one task of %g cores", cpus)
    seeds, hints, dropped, cfg, prepared, seconds, usage = _got([prepare_whole.options(
        num_cpus=cpus).remote(*apart(pair), cfg, settled, report, cpus)])[0]
    for stage, took in seconds.items():
        watch.seconds[stage] = watch.seconds.get(stage, 0.0) + took
    if dropped:
        pair = replace(pair, source=auto.unnamed(pair.source), target=auto.unnamed(pair.target))
    return replace(pair, seeds=seeds, hints=hints), cfg, prepared, [usage]


class Run:
    """One distributed run of a loaded pair: ``Run(pair, cfg, P).align_and_write(stage, run)``.

    ``pair``: its graphs' edges held in the object store (:func:`held_pair`); ``usage``:
    the processes that ran for the pair before it (:func:`prepare`)."""

    def __init__(self, pair: Pair, cfg: Config, partitions: int, watch: Stopwatch,
                 events: Events | None = None, prepared: Prepared | None = None,
                 usage: list[dict] | None = None) -> None:
        self.pair, self.cfg, self.P, self.watch = pair, cfg, partitions, watch
        self.prepared = prepared or Prepared({"enabled": False})
        self.events = events or (lambda event, info: None)
        self.device, self.actor_cpus, self.actor_options = placement(*resources(), partitions)
        self.usage: list[dict] = list(usage or [])
        self.searched: dict[str, dict] = {}  # per direction, the tuned nprobe and recall

    def _actor_memory(self, chans: list[Channel]) -> tuple[int, int]:
        """Bytes an actor holds at most, declared to Ray: for both graphs, its part's rows of
        the input and of two layers per channel, and of its embedding; at most what lets
        every part actor be placed at once (:func:`~.cluster.fitted_memory`). And how many
        the nodes hold at that estimate: as many compute a layer at once (:meth:`_propagate`)."""
        rows = (self.pair.source.num_nodes + self.pair.target.num_nodes) / self.P
        inputs = sum(3 * c.x_s.size(1) for c in chans)
        width = sum(c.embed.num_blocks * c.x_s.size(1) for c in chans)
        estimate = int(rows * 4 * (inputs + width)) + (256 << 20)
        nodes = node_memory()
        return (fitted_memory(estimate, self.P, nodes),
                max(1, min(self.P, placed(estimate, nodes))))

    def _parted(self, pair: Pair, cfg: Config, P: int
                ) -> list[list[tuple[ray.ObjectRef, ray.ObjectRef]]]:
        """Both graphs partitioned at once, a task each reading its blocks
        (:func:`~.actors.parted`); then each block cut by part (:func:`~.actors.split_block`)
        and each part of each graph joined from its pieces by a task of its own
        (:func:`~.actors.part_of_graph`), and the parts' halo and degrees planned by a task
        from what they found (:func:`~.actors.exchanged`); the driver receives who sends to
        whom and the cut. Returns each graph's parts, the references of its
        :class:`~.halo.GraphPart` without the halo and of the fields that complete it, kept
        for the run: a restarted actor is rebuilt from them. Each part builds its rows of
        the operator from the edges that touch it: no process builds a whole graph's
        operator on the parts' path (0.43 GiB at 1M nodes)."""
        graphs, names = (pair.source, pair.target), ("source", "target")
        # the parts' own rows of the degree encoding need every node's degree
        distinct = pair.anchored() is None and content_kind(pair, cfg).startswith("degree")
        out = [parted.remote(g.held, g.num_nodes, P, cfg, f"partition {name}")
               for g, name in zip(graphs, names)]
        self.usage += _got([used for used, _ in out])
        self.parting_refs = [put for _, put in out]
        self.parting = _got(self.parting_refs)
        roles = [g.num_roles if cfg.embed.relations else 0 for g in graphs]
        cut = []
        for g, name, put, num_roles in zip(graphs, names, self.parting_refs, roles):
            h = g.held
            split = [split_block.options(num_returns=P).remote(e, w, r if num_roles else None,
                                                               put)
                     for e, w, r in zip(h.edges, h.weights, h.roles)]
            split = [s if P > 1 else [s] for s in split]
            cut.append([part_of_graph.remote(p, put, g.num_nodes, num_roles, cfg, distinct,
                                             f"partition {name} part {p}",
                                             *(s[p] for s in split)) for p in range(P)])
        planned = [exchanged.options(num_returns=1 + P).remote(
            put, g.num_nodes, num_roles, cfg.embed.self_loops, f"partition {name} halo",
            *(c[0] for c in parts))
            for g, name, put, parts, num_roles in zip(graphs, names, self.parting_refs, cut,
                                                      roles)]
        self.exchange, self.has_roles, self.cut, self.degrees, refs = [], [], [], [], []
        for out, parts, num_roles in zip(planned, cut, roles):
            kept = _got([out[0]])[0]
            self.usage += kept["usage"]
            self.exchange.append(kept["exchange"])
            self.has_roles.append(num_roles > 0)
            self.cut.append(kept["cut"])
            self.degrees.append(kept["distinct"])
            refs.append([(c[1], f) for c, f in zip(parts, out[1:])])
        return refs

    def align_and_write(self, stage: write.Location, run: dict, resume: write.Location
                        ) -> tuple[dict, list[dict]]:
        """Every stage after load; returns the metrics and the dataset's file entries.

        The decided matches are also kept in ``resume`` until the output is committed."""
        pair, cfg, P = self.pair, self.cfg, self.P
        with self.watch.stage("partition"):
            self.plan = plan(pair, cfg)
            self.dense = dense_assignment(cfg.assign, self.plan.rows.size,
                                          self.plan.targets.size)
            self.on_parts = self._on_parts(self.plan)
            self.part_refs = self._parted(pair, cfg, P)
        with self.watch.stage("features"):
            self.chans, self.inputs = self._inputs()
        specs = [c.embed for c in self.chans]
        params = [layer_params(c.embed, c.x_s.size(1), cfg.seed) for c in self.chans]
        if cfg.refine.enabled:  # the refinement's psi_2, channel len(chans) of the actors
            specs.append(consensus_psi(cfg))
            params.append(layer_params(specs[-1], cfg.refine.dim))
        self.layer_params = params
        memory, self.at_once = self._actor_memory(self.chans)
        actors = dict(specs=specs, params=params, memory=memory)
        for attempt in range(1, RESTARTS + 2):
            try:
                metrics, pieces = self._decide(resume, **actors)
                if self.searched:
                    metrics = {**metrics, "search": self.searched}
                break
            except ray.exceptions.RayError as e:
                cause = _cause(e)
                if isinstance(cause, InputError):
                    raise cause from None
                if getattr(cause, "actor_init_failed", False):  # a restart would fail alike
                    raise JobError(f"a part actor could not start: {_raised(cause)}") from None
                if not isinstance(cause, LOST) or attempt > RESTARTS:
                    raise
                log.warning("lost a worker (%s); running embed, search, refine and assign "
                            "again (attempt %d of %d)", str(cause).splitlines()[0],
                            attempt + 1, RESTARTS + 1)
        with self.watch.stage("write"):
            light = ray.put(self._light_pair(edges=False))
            written = ray.get([write_part.remote(stage, q, light, pieces[q], cfg.top_k,
                                                 cfg.assign.min_confidence, run)
                               for q in range(P)])
        self.usage += [u for _, u in written]
        return metrics, [entry for entry, _ in written]

    def _inputs(self) -> tuple[list[Channel], list[list[ray.ObjectRef]]]:
        """The channels (their widths and settings, without rows) and, per graph and part,
        the part's rows of every channel's input or the :class:`~.actors.PartRecipe` its
        actor makes them by.

        Without seeds or hints, each part actor makes its own rows from its own nodes (a
        Parquet layout's names and vectors are read there, :attr:`Graph.content`): the
        driver only adds up the parts' n-gram or degree counts, or whether their vectors are
        counts (:class:`~tfgm_dist.pipeline.Content`), and makes one node's row, for the
        width; it never holds every name, vector or input row. Seeds and hints tie rows
        across the graphs and make the anchors: those channels are made from the whole pair
        in one task (:func:`~.actors.anchored_inputs`), which puts each part's rows, and
        the driver learns their widths."""
        pair, cfg, P = self.pair, self.cfg, self.P
        graphs, nodes = (pair.source, pair.target), [[pt.nodes(p) for p in range(P)]
                                                     for pt in self.parting]
        if pair.anchored() is not None:
            cpus = _largest_node_cpus()
            out = anchored_inputs.options(num_returns=1 + 2 * P, num_cpus=cpus).remote(
                *apart(pair), cfg, nodes, cpus)
            return _got([out[0]])[0], [out[1:1 + P], out[1 + P:]]
        kind, structure = content_kind(pair, cfg), has_structure(pair, cfg)
        log.info("features: each of the %d parts makes its %s rows from its own nodes", P,
                 kind)
        degrees = self.degrees

        def cut(g: int, at: np.ndarray) -> tuple[Graph, torch.Tensor | None]:
            return (graphs[g].of_nodes(at),
                    None if degrees[g] is None else degrees[g][torch.from_numpy(at)])

        count = part_counts.options(num_cpus=self.actor_cpus)
        counts = (_got([count.remote(*cut(g, at), kind, cfg, self.actor_cpus)
                        for g in (0, 1) for at in nodes[g]])
                  if counted(kind, cfg) else [])
        content = Content.of(kind, counts)
        one, deg = cut(0, nodes[0][0][:1])
        width = PartRecipe(one, content, cfg, False, deg).rows()[0].shape[1]
        none = torch.zeros(0, width)
        return (content_channels(kind, none, none, cfg, structure),
                [[ray.put(PartRecipe(part, content, cfg, structure, deg))
                  for part, deg in (cut(g, at) for at in nodes[g])] for g in (0, 1)])

    def _decide(self, resume: write.Location, specs: list[EmbedConfig],
                params: list[list[LayerParams]], memory: int
                ) -> tuple[dict, list[ray.ObjectRef]]:
        """embed, search, refine and assign; the metrics and the decided source parts."""
        cfg, P = self.cfg, self.P
        self.workers = [PartWorker.options(**self.actor_options, memory=memory).remote(
            p, *self.part_refs[0][p], *self.part_refs[1][p], self.inputs[0][p],
            self.inputs[1][p], specs, params, self.actor_cpus, self.device,
            self.at_once == P) for p in range(P)]
        try:
            ray.get([w.ready.remote() for w in self.workers])
            with self.watch.stage("embed"):
                emb = []
                # graph by graph, each one's layers let go once concatenated, before the
                # next one's are made: both graphs' layers of the 1M pair at P = 2 held in
                # the store at once had Ray spill 4 GiB to disk (search 244-295 s, not 190)
                for g in (0, 1):
                    blocks: list[ray.ObjectRef] = []
                    emb.append(self._embed(g, blocks))
                    _completed(blocks + emb[g], "embed", "blocks")
                    del blocks
            pl = self.plan
            with self.watch.stage("search"):
                forward = self._search("forward", emb[0], pl.searched, 1, emb[1], pl.targets)
                backward = None if pl.sources is None else self._search(
                    "backward", emb[1], pl.targets, 0, emb[0], pl.sources)
                _completed([*_flat(forward[0]), *(_flat(backward[0]) if backward else [])],
                           "search", "parts")
            if self.on_parts:
                best: list[ray.ObjectRef] = []
                if cfg.refine.enabled:
                    with self.watch.stage("refine"):
                        forward, best = self._refine([forward, backward], emb)
                with self.watch.stage("assign"):
                    metrics, pieces = self._assign(forward, best, resume)
            usage = [usage_of(w, f"part {p}") for p, w in enumerate(self.workers)]
        finally:
            for w in self.workers:
                ray.kill(w)
        self.usage += usage
        if self.on_parts:
            return metrics, pieces
        # a dense Hungarian, or a refined one-to-one decoding weighing the score, reads them
        embeddings = ([gathered_embedding.remote(pt, *e) for pt, e in zip(self.parting, emb)]
                      if self.dense or decodes_on_scores(cfg) else None)
        with self.watch.stage("refine+assign"):
            finish_cpus = _largest_node_cpus()
            out = finish.options(num_returns=2 + P, num_cpus=finish_cpus).remote(
                *apart(self._light_pair()), cfg, pl, self.parting[0], finish_cpus,
                _flat(forward[0]), _flat(forward[1]),
                None if backward is None else _flat(backward[0]),
                [] if backward is None else _flat(backward[1]), embeddings, scale(self.chans),
                self.prepared, resume)
            metrics, finish_usage = ray.get(out[:2])
        self.usage.append(finish_usage)
        return metrics, out[2:]

    def _on_parts(self, pl: Plan) -> bool:
        """Whether the refinement (if any) and the one-to-one decoding run on the part actors
        (:meth:`_refine`, :meth:`_assign`): the sparse auction, no polish, no bootstrapping
        (the driver's first pass calibrates the hinted rows), and unrefined, no backward
        search (only the finishing task reads one)."""
        ac = self.cfg.assign
        sparse = (ac.method == "one-to-one" and ac.one_to_one in ("auto", "sparse")
                  and not self.dense and not ac.polish and self.prepared.first is None)
        return sparse and (self.cfg.refine.enabled or pl.sources is None)

    def _refine(self, searched: list, emb: list[list[ray.ObjectRef]]
                ) -> tuple[tuple[list, list], list[ray.ObjectRef]]:
        """Both directions of the refinement on the part actors, each part refining its rows
        (:mod:`.consensus`), then merged, and the source lists' decoding scores made from
        the embeddings ``emb`` (:func:`~tfgm_dist.refine.decoding`): per part the decoding
        lists of its output rows (as :meth:`_assign` takes them), and the refs of each
        part's targets' best sources."""
        w, P, cfg, pair = self.workers, self.P, self.cfg, self.pair
        rc, spec = cfg.refine, consensus_psi(cfg)
        channel = len(self.chans)  # the actors' channel of psi_2 (align_and_write adds it)
        seeds = pair.seeds
        meter = Progress("refine", 2 * rc.steps, "steps")
        entries = []
        for d, (chunks, rows) in enumerate(searched):
            width = max(ray.get([w[p].list_width.remote(*chunks[p]) for p in range(P)]))
            options = dict(num_sources=self.parting[d].part.size, steps=rc.steps,
                           scale=scale(self.chans), dim=rc.dim, seed=cfg.seed)
            pinned = None if seeds is None else (seeds[d], seeds[1 - d])
            sent = [w[p].consensus.options(num_returns=2 * P).remote(
                d, P, np.concatenate(rows[p]), self.parting_refs[1 - d], width, pinned, options,
                *chunks[p]) for p in range(P)]
            ray.get([w[q].receive.remote(d, *[sent[p][q] for p in range(P)],
                                         *[sent[p][P + q] for p in range(P)])
                     for q in range(P)])
            for step in range(rc.steps):
                self.events("refine-step", {"direction": d, "step": step + 1, "workers": w})
                h_s = [self._call(w[p].indicators, d, p, spec.layers > 0, d) for p in range(P)]
                parts_of = self._per_part(
                    [w[p].contributions.options(num_returns=P).remote(d) for p in range(P)])
                h_t = [self._call(w[q].transposed, 1 - d, q, spec.layers > 0, d,
                                  *[parts_of[p][q] for p in range(P)]) for q in range(P)]
                o_s = self._kept(spec, self._propagate(d, channel, spec, h_s))
                o_t = self._kept(spec, self._propagate(1 - d, channel, spec, h_t))
                served = self._per_part([w[q].serve.options(num_returns=P).remote(
                    d, *[block[q] for block in o_t]) for q in range(P)])
                ray.get([w[p].update.remote(d, len(o_s), *[block[p] for block in o_s],
                                            *[served[q][p] for q in range(P)])
                         for p in range(P)])
                meter.advance()
            entries.append(self._per_part(
                [w[p].refined.options(num_returns=P).remote(d) for p in range(P)]))
        ray.get([w[p].merged.remote(d, *[entries[1 - d][q][p] for q in range(P)])
                 for d in (0, 1) for p in range(P)])
        # the decoding scores of the source lists, from the rows of the targets they list
        wanted = self._per_part([w[p].wanted.options(num_returns=P).remote(self.parting_refs[1])
                                 for p in range(P)])
        weight = cfg.assign.score_weight / scale(self.chans)
        ray.get([w[p].decode_on.remote(weight, emb[0][p], self.parting_refs[1],
                                       *[w[q].rows_of.remote(emb[1][q], wanted[p][q])
                                         for q in range(P)]) for p in range(P)])
        source_part = self.parting[0].part
        rows = [self.plan.rows[source_part[self.plan.rows] == q] for q in range(P)]
        lists = [[w[q].lists_of.remote(rows[q])] for q in range(P)]
        return (lists, [[r] for r in rows]), [w[q].best_sources.remote() for q in range(P)]

    def _assign(self, forward: tuple[list, list], best: list[ray.ObjectRef],
                resume: write.Location) -> tuple[dict, list[ray.ObjectRef]]:
        """:func:`one_to_one` on the part actors, then each concludes its rows; the
        combined metrics and the parts' pieces. The rows that are their target's best source
        too are told by ``best`` (refined) or by the lists (:meth:`.PartWorker.listing_best`),
        and without held-out seeds the confidence is fitted on them over every part's rows,
        in one process's order."""
        w, P, pair = self.workers, self.P, self.pair
        one_to_one(w, *forward, pair.target.num_nodes, self.parting[1].part, self.events)
        score_scale = 2.0 if best else scale(self.chans)  # refined: two probabilities summed
        # unrefined, no backward search: each target's best source among the rows listing it
        best = best or [w[q].listing_best.remote() for q in range(P)]
        decided = ray.get([w[q].decided.remote(score_scale, pair.target.num_nodes, *best)
                           for q in range(P)])
        fit, self_fitted = None, {}
        if self.prepared.calibration is None:
            order = np.argsort(np.concatenate([np.concatenate(r) for r in forward[1]]))
            margin = torch.from_numpy(np.concatenate([m for m, _ in decided])[order])
            mutual = np.concatenate([u for _, u in decided])[order]
            fit = estimate.on_mutual(margin, mutual)
            self_fitted = {**estimate.proxy(mutual, margin), "confidence_fitted_on": fit.fitted_on}
        gold, prepared = ray.put(pair.gold), ray.put(self.prepared)  # one copy for every part
        out = [w[q].conclude.options(num_returns=2).remote(q, gold, prepared, resume, fit)
               for q in range(P)]
        # every part has kept its piece before the checkpoint is marked complete (without
        # gold nothing else waits for them: the mark was written before the folder existed)
        evaluated = ray.get([o[1] for o in out])
        found = metrics.combined(evaluated) if pair.gold is not None else {}
        if pair.gold is not None and not found["evaluated"]:
            raise InputError(NO_GOLD_ASKED)
        if self_fitted:
            found["estimate"] = self_fitted
        found = self.prepared.described(found)
        checkpoint.save_done(resume, found, P)
        return found, [o[0] for o in out]

    def report(self) -> dict[str, Any]:
        """What the run's metrics say about the distribution."""
        return {"partitions": self.P, "partitioner": self.parting[0].method,
                "cut_edges": self.cut,
                "device": self.device, "processes": self.usage}

    def _light_pair(self, edges: bool = True) -> Pair:
        """The pair without node features and names: what the later stages need; without
        the ``edges``' references, the graphs' ids alone, what the write tasks need (and
        without gold's 16 MB at 1M nodes)."""
        strip = dict(features=None, names=None, content=None)
        if not edges:
            strip.update(held=None)
            return Pair(replace(self.pair.source, **strip), replace(self.pair.target, **strip))
        return replace(self.pair, source=replace(self.pair.source, **strip),
                       target=replace(self.pair.target, **strip))

    def _call(self, method, g: int, p: int, send: bool, *args, share: bool = False
              ) -> list[ray.ObjectRef]:
        """``method(send, *args)`` of part ``p``'s rows of graph ``g``: the rows, then (if
        ``send``) one slice per part whose halo holds some of them, then (if ``send`` and
        ``share``) the part's share of the next layer's role rows."""
        n = 1 + len(self.exchange[g][p][1]) + int(share) if send else 1
        out = method.options(num_returns=n).remote(send, *args)
        return [out] if n == 1 else list(out)

    def _per_part(self, calls: list) -> list[list[ray.ObjectRef]]:
        """Calls with one return per part, as lists (one return is not a list)."""
        return [[c] if self.P == 1 else list(c) for c in calls]

    def _propagate(self, g: int, c: int, spec: EmbedConfig, h: list[list[ray.ObjectRef]],
                   on_layer: Callable[[int], None] = lambda l: None
                   ) -> list[list[ray.ObjectRef]]:
        """Per block (the input first where ``spec.include_input``, then each layer's),
        per part, graph ``g``'s rows of channel ``c`` of the actors (``spec``), from
        ``h``: each part's input rows and their slices (:meth:`_call`). Where the channel
        propagates over the graph's relation roles, each layer's role rows are the parts'
        shares added up in one task (:func:`~.actors.role_rows`), which every part reads at
        the next layer.

        Where the nodes hold fewer part actors at their estimate than there are parts
        (:meth:`_actor_memory`), only that many layers are computed at once, and the
        actors let a layer's stacked rows go with it: a layer's call peaked at 1.5-1.6 GiB
        of its own in each part actor of the 1M pair at P = 4 (0.9 GiB once constructed), and
        the 3M pair's four at once, a minute into the embedding, had Ray's memory monitor
        kill them."""
        P, w, exchange = self.P, self.workers, self.exchange[g]
        relational = spec.relations and self.has_roles[g]
        layers = [[x[0] for x in h]] if spec.include_input else []
        roles = None  # the previous layer's role rows: the input's are zeros
        running: list[ray.ObjectRef] = []
        for l in range(spec.layers):
            on_layer(l)
            more = l + 1 < spec.layers
            previous, h = h, []
            for p in range(P):
                if self.at_once < P and len(running) >= self.at_once:
                    _, running = ray.wait(running, num_returns=len(running) - self.at_once + 1)
                h.append(self._call(w[p].layer, g, p, more, g, c, l, previous[p][0], roles,
                                    *[previous[q][1 + exchange[q][1].index(p)]
                                      for q in exchange[p][0]], share=relational))
                running.append(h[-1][0])
            if relational and more:
                roles = role_rows.remote(self.layer_params[c][l], spec, roles,
                                         *[x[-1] for x in h])
            layers.append([x[0] for x in h])
        return layers

    @staticmethod
    def _kept(spec: EmbedConfig, layers: list[list[ray.ObjectRef]]
              ) -> list[list[ray.ObjectRef]]:
        """The blocks an embedding keeps: the last alone for BasicTFGM, else every one."""
        return [layers[-1]] if spec.basic else layers

    def _embed(self, g: int, submitted: list[ray.ObjectRef]) -> list[ray.ObjectRef]:
        """Per part, the object reference of graph ``g``'s embedding rows; each layer's
        blocks are added to ``submitted`` (to watch them complete)."""
        P, w = self.P, self.workers
        blocks: list[list[ray.ObjectRef]] = [[] for _ in range(P)]
        scales: list[float] = []
        for c, ec in enumerate(spec.embed for spec in self.chans):

            def announce(l: int) -> None:
                self.events("embed-layer", {"graph": g, "channel": c, "layer": l + 1,
                                            "workers": w})
                log.info("embed: graph %s, channel %d, layer %d/%d on %d parts",
                         "st"[g], c, l + 1, ec.layers, P)

            h = [self._call(w[p].first, g, p, ec.layers > 0, g, c) for p in range(P)]
            layers = self._propagate(g, c, ec, h, announce)
            submitted += [ref for layer in layers[int(ec.include_input):] for ref in layer]
            kept = self._kept(ec, layers)
            for p in range(P):
                blocks[p] += [lay[p] for lay in kept]
            scales += [(self.chans[c].weight * w) ** 0.5 for w in ec.block_weights]
        return [w[p].concat.remote(g, scales, *blocks[p]) for p in range(P)]

    def _search(self, key: str, queries: list, query_nodes: np.ndarray, base_graph: int,
                base: list, base_nodes: np.ndarray) -> tuple[list[list], list[list[np.ndarray]]]:
        """Per query part, the merged top-k of its ``query_nodes`` over every shard, and
        those nodes, in chunks (ascending).

        An IVF index is trained once for every shard to copy (:meth:`_trained`), and its
        ``nprobe`` tuned first, on the same sample of query nodes as in one process:
        each shard reports the best score it finds for them and the exact best in the shard,
        and the maxima over the shards are what the merged search finds and should find."""
        k, opts, recall = self.cfg.search.k, search_options(self.cfg), self.cfg.search.recall
        qpart = self.parting[1 - base_graph]
        bpart = self.parting[base_graph]
        shard_ids = [base_nodes[bpart.part[base_nodes] == p] for p in range(self.P)]
        shards = [p for p in range(self.P) if shard_ids[p].size]
        # put once, not sent with every call: 16 chunks x 2 shards of the 1M pair had written
        # 0.27 GB of copies into the object store from the driver (counted in its RSS)
        shard_rows = [ray.put(bpart.position[ids]) for ids in shard_ids]
        shard_ids = [ray.put(ids) for ids in shard_ids]
        trained = (self._trained(opts, base, base_nodes, bpart, shards)
                   if opts["kind"] in IVF_KINDS else None)
        if recall > 0 and trained is not None:
            sample = query_nodes[probe_rows(query_nodes.size, self.cfg.seed)]
            sample_rows = [qpart.position[sample[qpart.part[sample] == q]] for q in range(self.P)]

            def measure(nprobe: int) -> tuple[np.ndarray, np.ndarray, int]:
                got = ray.get([self.workers[p].probe.remote(key, k, base[p], shard_rows[p], opts,
                                                            trained, nprobe, sample_rows,
                                                            *queries)
                               for p in shards])
                return (np.max([f for f, _, _ in got], axis=0),
                        np.max([e for _, e, _ in got], axis=0), max(n for _, _, n in got))

            self.searched[key] = tune_nprobe(measure, opts["nprobe"], recall)
            opts = {**opts, "nprobe": self.searched[key]["nprobe"]}
        merged: list[list[ray.ObjectRef]] = [[] for _ in range(self.P)]
        rows: list[list[np.ndarray]] = [[] for _ in range(self.P)]
        for q in range(self.P):
            self.events("search", {"direction": key, "part": q, "workers": self.workers})
            part = query_nodes[qpart.part[query_nodes] == q]
            # in chunks, so that progress is reported as they complete, not once per part
            for nodes in np.array_split(part, max(1, -(-part.size // SEARCH_CHUNK))):
                # each shard reads the chunk's rows, cut by their part, not the whole query
                # part: every shard had touched every query part's pages (the 1M pair at
                # P = 4: 3.1-3.8 GiB of object-store pages in each part actor's RSS)
                chunk = self.workers[q].rows_of.remote(queries[q], qpart.position[nodes])
                hits = [self.workers[p].search.remote(key, k, chunk, base[p], shard_rows[p],
                                                      shard_ids[p], opts, trained)
                        for p in shards]
                merged[q].append(self.workers[q].merge.remote(k, *hits))
                rows[q].append(nodes)
            log.info("search %s: part %d/%d, %d queries through %d shards", key, q + 1,
                     self.P, part.size, len(shards))
        return merged, rows

    def _trained(self, opts: dict, base: list, base_nodes: np.ndarray, bpart: Partition,
                 shards: list[int]) -> ray.ObjectRef:
        """One IVF index trained for the whole base, serialised, for every shard to copy:
        the sample one process trains on (:func:`~tfgm_dist.search.training_rows` of
        ``base_nodes``), each part sending its share of it to the first shard's actor."""
        kind = ray.get(self.workers[shards[0]].index_kind.remote(opts["kind"]))
        position = training_rows(base_nodes.size, kind, opts["nlist"], opts["seed"])
        sample = base_nodes[position]
        mine = [np.flatnonzero(bpart.part[sample] == p) for p in shards]
        pieces = [self.workers[p].rows_of.remote(base[p], bpart.position[sample[m]])
                  for p, m in zip(shards, mine)]
        return self.workers[shards[0]].train.remote(
            kind, base_nodes.size, opts["nlist"], len(shards),
            *[position[m] for m in mine], *pieces)
