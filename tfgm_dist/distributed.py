"""The pipeline on Ray: partitioned embedding actors, sharded FAISS search, workers that write.

The driver loads the pair and computes the input features. Everything that grows with the
graphs then runs in Ray workers, and the driver hands them object references, not arrays:

- **embed**: both graphs' nodes are split into P parts (:mod:`tfgm_dist.partition`). Actor
  ``p`` holds part ``p``'s row blocks of both operators and, layer by layer, computes its rows
  of :math:`F_l` from the previous layer's rows of its 1-hop halo: its own, and from each
  other part the slice of that part's rows in its halo, which that part returns as a separate
  object (:func:`graph_parts` plans who sends which rows to whom).
- **search**: actor ``p`` is also the FAISS shard of its part's rows. Every part's query rows
  go through every shard, and one task per query part merges the per-shard top-k.
- **refine, assign**: one task runs the single-process code on the merged candidates (both
  stages are global), and returns the result cut into the source parts.
- **write**: one task per source part writes its rows as one file of the Parquet dataset.

An actor keeps nothing it cannot rebuild: each method's result depends only on the
constructor's and its own arguments, and the FAISS indexes are caches. Ray restarts a killed
actor, retries its calls, and the run produces the same output. When a node is lost, calls
to its actors fail before Ray has restarted them; the driver then runs embed to assign again
on fresh actors (everything is deterministic, so the output is the same). The decided parts
are kept beside the output (:mod:`tfgm_dist.checkpoint`) until it is committed.

:class:`ShardedIndex` is the same sharded search on its own (the supervised kNN uses it).
"""
from __future__ import annotations

import logging
import os
import socket
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable

import numpy as np
import ray
import torch
import torch.nn.functional as F
from ray._private import ray_constants

from . import checkpoint, write
from .auto import Prepared
from .config import Config, EmbedConfig
from .embed import LayerParams, RowBlock, layer, layer_params, row_block
from .errors import InputError
from .partition import Partition, partition
from .features import Channel
from .assign import dense_assignment
from .pipeline import (Pair, Plan, Scored, channels, conclude, operators, plan, refined, scale,
                       search_options)
from .search import (IVF_KINDS, Candidates, build_index, exact_best, probe, probe_rows, search,
                     set_nprobe, tune_nprobe)
from .stopwatch import Progress, Stopwatch, peak_rss_bytes

log = logging.getLogger("tfgm_dist")

RESTARTS = 3  # times Ray restarts a dead actor and retries a failed call or task
RESTART_HEADROOM = 0.5  # share of an actor's threads reserved as Ray CPUs
Events = Callable[[str, dict], None]  # hears of each layer and search part as submitted


CONNECT_TIMEOUT_S = 60.0  # an address that does not answer within this is an error


def connect(address: str = "") -> None:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``); else start a fresh one
    in-process.

    A fresh one, always: ``address="local"`` ignores the address file a dead head may have
    left in Ray's temp folder (joining it hangs forever). A given address must answer within
    :data:`CONNECT_TIMEOUT_S` (Ray itself retries forever), or this raises an
    :class:`InputError` naming it. An in-process cluster binds to loopback and runs no
    dashboard.
    """
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address and address != "local":
        if address != "auto":
            _answers(address)
        log.info("ray: joining the cluster at %s", address)
        ray.init(address=address, log_to_driver=True)
    else:
        log.info("ray: starting a local cluster on 127.0.0.1")
        # On Linux, Ray binds its servers to every interface even with a loopback node
        # address; its single-machine mode (the Windows/macOS default) keeps them on loopback.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 log_to_driver=True)


def _answers(address: str) -> None:
    """Raise :class:`InputError` unless a TCP connection to ``address`` (``host:port``, with
    or without a ``ray://`` or ``http://`` scheme) opens within :data:`CONNECT_TIMEOUT_S`."""
    where = address.split("://", 1)[-1].rstrip("/")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"ray address {address!r}: expected HOST:PORT")
    timeout_s = CONNECT_TIMEOUT_S
    deadline, error = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            return
        except OSError as e:
            error = e
            time.sleep(1.0)
    raise InputError(f"ray address {address}: nothing answered at {host}:{port} within "
                     f"{timeout_s:g} s ({error})")


@dataclass
class Usage:
    """Seconds per stage and peak memory of one Ray process, for ``metrics.json``."""

    role: str
    seconds: dict[str, float] = field(default_factory=dict)

    def add(self, stage: str, start: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start

    def report(self) -> dict[str, Any]:
        return {"role": self.role, "host": socket.gethostname(),
                "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "seconds": self.seconds, "peak_rss_bytes": peak_rss_bytes()}


def _threads(num_cpus: float) -> int:
    """Set up this Ray worker process for a task or actor of ``num_cpus`` cores."""
    # Arrays from the object store are read-only; no stage writes into its inputs.
    warnings.filterwarnings("ignore", "The given NumPy array is not writable")
    n = max(1, int(num_cpus))
    torch.set_num_threads(n)
    import faiss
    faiss.omp_set_num_threads(n)
    return n


@dataclass(frozen=True)
class GraphPart:
    """What the actor of one part needs of one graph, and what it sends to the others.

    A layer of part ``p`` reads the previous layer's rows of its halo: its own part's rows,
    which it made, and for each other part ``q`` in ``needs`` only the rows of ``q`` in its
    halo, which ``q`` sends as a slice of its output (``sends``), not its whole part.
    """

    block: RowBlock  # the part's rows of the operator, columns = its halo
    inputs: list[np.ndarray]  # per channel, the part's rows of X, [n_p, d]
    needs: list[int]  # other parts holding halo rows, in the order their slices are passed
    gather: np.ndarray  # halo rows within [own rows; the needed parts' slices]
    consumers: list[int]  # other parts whose halo holds some of this part's rows
    sends: list[np.ndarray]  # per consumer, the rows of this part it needs (its slice)


@ray.remote(max_restarts=RESTARTS, max_task_retries=RESTARTS)
class PartWorker:
    """Part ``p`` of both graphs: its embedding rows, layer by layer, and its FAISS shard."""

    def __init__(self, p: int, parts: tuple[GraphPart, GraphPart], specs: list[EmbedConfig],
                 params: list[list[LayerParams]], num_cpus: float, device: str) -> None:
        self.threads = _threads(num_cpus)
        self.p, self.parts, self.specs, self.device = p, parts, specs, device
        self.params = [[LayerParams(*(None if t is None else t.to(device)
                                      for t in (q.weight, q.bias))) for q in channel]
                       for channel in params]
        self.blocks = [replace(g.block, adj=g.block.adj.to(device)) for g in parts]
        self.indexes: dict[str, Any] = {}
        self.exact: dict[str, np.ndarray] = {}
        self.usage = Usage(f"part {p}")

    def _out(self, g: int, rows: np.ndarray, send: bool) -> Any:
        """A layer's result: the part's rows, then the slice for each consumer if ``send``
        (the call is made with one return per item)."""
        if not send or not self.parts[g].consumers:
            return rows
        return (rows, *[rows[r] for r in self.parts[g].sends])

    def first(self, send: bool, g: int, c: int) -> Any:
        """:math:`F^{(0)}` rows of graph ``g``'s channel ``c``: the normalised input."""
        rows = F.normalize(torch.from_numpy(self.parts[g].inputs[c]).float(), dim=-1).numpy()
        return self._out(g, rows, send)

    def layer(self, send: bool, g: int, c: int, l: int, own: np.ndarray, *needed: np.ndarray
              ) -> Any:
        """:math:`F^{(l)}` rows of graph ``g``'s channel ``c`` from the previous layer's rows:
        ``own`` (this part's) and the slices of the parts in ``needs``."""
        start = time.perf_counter()
        rows = np.concatenate([own, *needed]) if needed else own
        h_halo = torch.from_numpy(_take(rows, self.parts[g].gather)).to(self.device)
        out = layer(self.blocks[g], h_halo, self.params[c][l], self.specs[c].relu)
        if self.specs[c].basic:
            out = F.normalize(out + torch.from_numpy(own).to(self.device), dim=-1)
        self.usage.add("embed", start)
        return self._out(g, out.cpu().numpy(), send)

    def concat(self, scales: list[float], *blocks: np.ndarray) -> np.ndarray:
        """The part's embedding rows: its per-layer and per-channel blocks side by side, each
        times its channel's :math:`\\sqrt{w}` in ``scales``."""
        return np.ascontiguousarray(np.concatenate([b * f for b, f in zip(blocks, scales)],
                                                   axis=1), dtype=np.float32)

    def _index(self, key: str, base: np.ndarray, base_rows: np.ndarray, options: dict):
        """The FAISS index of this shard's ``base[base_rows]``, built on first use under
        ``key`` and cached (a restarted actor builds the same one again)."""
        if key not in self.indexes:
            self.indexes[key] = build_index(_take(base, base_rows), **options)
        return self.indexes[key]

    def probe(self, key: str, k: int, base: np.ndarray, base_rows: np.ndarray, options: dict,
              nprobe: int, rows: list[np.ndarray], *queries: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, int]:
        """For the sample queries (rows ``rows[q]`` of each query part ``queries[q]``): the
        best score this shard's index finds with ``nprobe`` lists, the exact best score in
        the shard, and the shard's number of lists."""
        start = time.perf_counter()
        index = self._index(key, base, base_rows, options)
        probes = np.concatenate([x[r] for x, r in zip(queries, rows)])
        if key not in self.exact:
            self.exact[key] = exact_best(_take(base, base_rows), probes)
        found, nlist = probe(index, probes, k, nprobe)
        self.usage.add("search", start)
        return found, self.exact[key], nlist

    def search(self, key: str, k: int, queries: np.ndarray, rows: np.ndarray, base: np.ndarray,
               base_rows: np.ndarray, base_ids: np.ndarray, options: dict
               ) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of ``queries[rows]`` among this shard's ``base[base_rows]`` (node numbers
        ``base_ids``), with ``options["nprobe"]`` lists for an IVF index."""
        start = time.perf_counter()
        index = self._index(key, base, base_rows, options)
        if options["kind"] in IVF_KINDS:
            set_nprobe(index, options["nprobe"])
        c = search(index, _take(queries, rows), k, ids=base_ids)
        self.usage.add("search", start)
        return c.scores.numpy(), c.index.numpy()

    def report(self) -> dict[str, Any]:
        return {**self.usage.report(), "threads": self.threads, "device": self.device}


def _take(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]``, without a copy when ``rows`` are all rows in order (a part's embedding
    searched whole is the object store's array itself, not a second gigabyte-sized copy)."""
    return x if rows.size == x.shape[0] and np.array_equal(rows, np.arange(rows.size)) else x[rows]


@ray.remote(num_cpus=0, max_retries=RESTARTS)
def merge_top_k(k: int, *shards: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of the per-shard top-k lists of one query part (canonical order)."""
    c = Candidates.sorted(torch.from_numpy(np.concatenate([s for s, _ in shards], 1)),
                          torch.from_numpy(np.concatenate([i for _, i in shards], 1)))
    return c.scores[:, :k].numpy(), c.index[:, :k].numpy()


@ray.remote(max_restarts=RESTARTS, max_task_retries=RESTARTS)
class Shard:
    """A FAISS index over some rows of a matrix (node numbers ``ids``), held by one actor."""

    def __init__(self, x: np.ndarray, ids: np.ndarray, options: dict, num_cpus: float) -> None:
        _threads(num_cpus)
        self.index, self.ids = build_index(x, **options), ids

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        c = search(self.index, queries, k, ids=self.ids)
        return c.scores.numpy(), c.index.numpy()


class ShardedIndex:
    """The rows of ``x`` split into ``shards`` FAISS indexes on Ray actors; calling it with
    ``(queries, k)`` merges the per-shard top-k into :class:`Candidates`, equal to one
    index's for exact (``flat``) indexes. The supervised kNN searches its labelled nodes so."""

    def __init__(self, x: np.ndarray, shards: int, options: dict) -> None:
        cpus, _ = _resources()
        bounds = np.linspace(0, x.shape[0], shards + 1).astype(np.int64)
        self.actors = [Shard.options(num_cpus=cpus / shards * RESTART_HEADROOM,
                                     scheduling_strategy="SPREAD").remote(
            x[a:b], np.arange(a, b), options, cpus / shards) for a, b in zip(bounds, bounds[1:])]
        log.info("search: %d rows in %d shards", x.shape[0], shards)

    def __call__(self, queries: np.ndarray, k: int) -> Candidates:
        q = ray.put(np.ascontiguousarray(queries, dtype=np.float32))
        scores, index = ray.get(merge_top_k.remote(k, *[a.search.remote(q, k)
                                                        for a in self.actors]))
        return Candidates(torch.from_numpy(scores), torch.from_numpy(index))

    def close(self) -> None:
        for a in self.actors:
            ray.kill(a)


def _gather(lists: list[tuple[np.ndarray, np.ndarray]], rows: list[np.ndarray], n: int
            ) -> Candidates:
    """One ``n``-row candidate matrix from per-part lists of the node numbers ``rows``."""
    scores = np.concatenate([s for s, _ in lists])
    index = np.concatenate([i for _, i in lists])
    return Candidates(torch.from_numpy(scores), torch.from_numpy(index)).scatter_rows(
        torch.from_numpy(np.concatenate(rows)), n)


@ray.remote(max_retries=RESTARTS)
def _finish(pair: Pair, cfg: Config, pl: Plan, part_s: Partition, num_cpus: float,
            forward: list, forward_rows: list[np.ndarray], backward: list | None,
            backward_rows: list[np.ndarray], embeddings: list | None, score_scale: float,
            prepared: Prepared, resume: write.Location) -> tuple:
    """refine + assign on the merged candidates; the result cut into the source parts,
    which are also kept in ``resume`` (see :mod:`tfgm_dist.checkpoint`)."""
    _threads(num_cpus)
    usage, watch = Usage("refine+assign"), Stopwatch()
    fwd = _gather(ray.get(forward), forward_rows, pair.source.num_nodes)
    bwd = None if backward is None else _gather(ray.get(backward), backward_rows,
                                                pair.target.num_nodes)
    o_s = o_t = None
    if embeddings is not None:
        o_s, o_t = (torch.from_numpy(e) for e in ray.get(embeddings))
    scored = Scored(fwd, bwd, torch.from_numpy(pl.rows), pl.targets, pair.target.num_nodes,
                    o_s, o_t, scale=score_scale)
    scored = refined(pair, cfg, scored, operators(pair, cfg), watch)
    result = prepared.finish(conclude(pair, scored, cfg, watch), pair.gold)
    usage.seconds = watch.seconds
    which = part_s.part[result.rows.numpy()]
    pieces = []
    for q in range(part_s.num_parts):
        m = torch.from_numpy(which == q)
        pieces.append(replace(result, rows=result.rows[m],
                              candidates=result.candidates.take_rows(m),
                              matched=result.matched[m], matched_score=result.matched_score[m],
                              mutual=None if result.mutual is None else result.mutual[m],
                              confidence=None if result.confidence is None
                              else result.confidence[m], metrics={}))
        checkpoint.save_piece(resume, q, pieces[-1])
    checkpoint.save_done(resume, result.metrics, part_s.num_parts)
    return (result.metrics, usage.report(), *pieces)


@ray.remote(max_retries=RESTARTS)
def _write_part(stage: write.Location, q: int, pair: Pair, piece, top_k: int,
                min_confidence: float, run: dict) -> tuple:
    """Write source part ``q``'s rows as file ``q`` of the staged dataset."""
    start, usage = time.perf_counter(), Usage(f"write {q}")
    entry = write.write_matches(stage, write.match_table(pair, piece, top_k, min_confidence), run,
                                part=q)
    usage.add("write", start)
    return entry, usage.report()


@ray.remote
def _embedding(parting: Partition, *parts: np.ndarray) -> np.ndarray:
    """A whole graph's embedding from its parts' rows (only for the dense Hungarian)."""
    out = np.empty((parting.part.size, parts[0].shape[1]), dtype=np.float32)
    for p, rows in enumerate(parts):
        out[parting.nodes(p)] = rows
    return out


# Failures of the cluster, not of the input: a run that meets one is run again.
LOST = (ray.exceptions.RayActorError, ray.exceptions.ObjectLostError,
        ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
        ray.exceptions.LocalRayletDiedError)


def _cause(error: Exception) -> Exception:
    """The innermost cause of a task error (a task fails when one of its inputs failed)."""
    while isinstance(error, ray.exceptions.RayTaskError) and error.cause is not None \
            and error.cause is not error:
        error = error.cause
    return error


def _completed(refs: list[ray.ObjectRef], stage: str, unit: str) -> None:
    """Wait for ``refs`` one by one as they complete, reporting the share done
    (:class:`Progress`). The objects stay where they are (``fetch_local=False``): the driver
    only learns that they exist."""
    meter, pending = Progress(stage, len(refs), unit), list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1, fetch_local=False)
        meter.advance(len(ready))


def _report(worker: ray.actor.ActorHandle, role: str) -> dict[str, Any]:
    """An actor's usage; an actor being restarted after a lost node may not answer, which
    must not fail a run whose results are already in."""
    try:
        return ray.get(worker.report.remote(), timeout=30)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
            ray.exceptions.GetTimeoutError) as e:
        return {"role": role, "unavailable": str(e).splitlines()[0]}


def _resources() -> tuple[float, float]:
    """CPUs and GPUs of the cluster."""
    total = ray.cluster_resources()
    return float(total.get("CPU", 1)), float(total.get("GPU", 0))


def graph_parts(op, xs: list[torch.Tensor], parting: Partition) -> list[GraphPart]:
    """Each part's :class:`GraphPart` of one graph: its row block, inputs, and the halo rows
    it exchanges with the other parts."""
    P = parting.num_parts
    blocks = [row_block(op, torch.from_numpy(parting.nodes(p))) for p in range(P)]
    halos = [b.halo.numpy() for b in blocks]
    owner = [parting.part[h] for h in halos]
    needs = [sorted(set(owner[p].tolist()) - {p}) for p in range(P)]
    consumers = [[p for p in range(P) if q in needs[p]] for q in range(P)]
    parts = []
    for p in range(P):
        gather = np.empty(halos[p].size, dtype=np.int64)
        own = owner[p] == p
        gather[own] = parting.position[halos[p][own]]
        offset = blocks[p].nodes.numel()
        for q in needs[p]:
            mine = owner[p] == q
            gather[mine] = offset + np.arange(int(mine.sum()))
            offset += int(mine.sum())
        sends = [parting.position[halos[c][owner[c] == p]] for c in consumers[p]]
        parts.append(GraphPart(blocks[p], [x[blocks[p].nodes].numpy() for x in xs], needs[p],
                               gather, consumers[p], sends))
    return parts


def placement(cpus: float, gpus: float, partitions: int) -> tuple[str, float, dict[str, Any]]:
    """Where the ``partitions`` part actors of a cluster with ``cpus`` and ``gpus`` run: their
    torch device, the threads each runs, and the Ray options each asks for.

    With GPUs, each actor takes ``gpus / partitions`` of them (one each when ``partitions``
    equals the GPU count, as ``jobs.align`` chooses) and its tensors and FAISS index live on
    the GPU. Without, each runs ``cpus / partitions`` threads and reserves half of them as Ray
    CPUs, so that the actors of a lost node can be restarted on the nodes that are left.
    Actors are spread over the nodes either way.
    """
    threads = cpus / partitions
    if gpus:
        return "cuda", threads, {"scheduling_strategy": "SPREAD", "num_cpus": 0,
                                 "num_gpus": gpus / partitions}
    return "cpu", threads, {"scheduling_strategy": "SPREAD",
                            "num_cpus": threads * RESTART_HEADROOM}


class Run:
    """One distributed run of a loaded pair: ``Run(pair, cfg, P).align_and_write(stage, run)``."""

    def __init__(self, pair: Pair, cfg: Config, partitions: int, watch: Stopwatch,
                 events: Events | None = None, prepared: Prepared | None = None
                 ) -> None:
        self.pair, self.cfg, self.P, self.watch = pair, cfg, partitions, watch
        self.prepared = prepared or Prepared({"enabled": False})
        self.events = events or (lambda event, info: None)
        self.device, self.actor_cpus, self.actor_options = placement(*_resources(), partitions)
        self.usage: list[dict] = []
        self.searched: dict[str, dict] = {}  # per direction, the tuned nprobe and recall

    def _actor_memory(self, chans: list[Channel]) -> int:
        """Bytes an actor holds at most, declared to Ray: for both graphs, its part's rows of
        the input and of two layers per channel, of its embedding and of the FAISS copy."""
        rows = (self.pair.source.num_nodes + self.pair.target.num_nodes) / self.P
        inputs = sum(3 * c.x_s.size(1) for c in chans)
        width = sum(c.embed.num_blocks * c.x_s.size(1) for c in chans)
        return int(rows * 4 * (inputs + 2 * width)) + (256 << 20)

    def align_and_write(self, stage: write.Location, run: dict, resume: write.Location
                        ) -> tuple[dict, list[dict]]:
        """Every stage after load; returns the metrics and the dataset's file entries.

        The decided matches are also kept in ``resume`` until the output is committed."""
        pair, cfg, P = self.pair, self.cfg, self.P
        with self.watch.stage("features"):
            chans = channels(pair, cfg)
            ch = [[c.x_s for c in chans], [c.x_t for c in chans]]
        with self.watch.stage("partition"):
            ops = operators(pair, cfg)
            self.parting = [partition(g.edge_index, g.num_nodes, P, seed=cfg.seed)
                            for g in (pair.source, pair.target)]
            per_graph = [graph_parts(op, xs, parting)
                         for op, xs, parting in zip(ops, ch, self.parting)]
            self.exchange = [[(gp.needs, gp.consumers) for gp in parts] for parts in per_graph]
            # Held for the run: a restarted actor is rebuilt from these objects.
            self.part_refs = [ray.put((per_graph[0][p], per_graph[1][p])) for p in range(P)]
            del per_graph
        self.chans = [replace(c, x_s=c.x_s[:0], x_t=c.x_t[:0]) for c in chans]  # no rows
        actors = dict(params=[layer_params(c.embed, c.x_s.size(1), cfg.seed) for c in chans],
                      memory=self._actor_memory(chans))
        del chans, ch
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
                if not isinstance(cause, LOST) or attempt > RESTARTS:
                    raise
                log.warning("lost a worker (%s); running embed, search, refine and assign "
                            "again (attempt %d of %d)", str(cause).splitlines()[0],
                            attempt + 1, RESTARTS + 1)
        with self.watch.stage("write"):
            light = ray.put(self._light_pair())
            written = ray.get([_write_part.remote(stage, q, light, pieces[q], cfg.top_k,
                                                 cfg.assign.min_confidence, run)
                               for q in range(P)])
        self.usage += [u for _, u in written]
        return metrics, [entry for entry, _ in written]

    def _decide(self, resume: write.Location, params: list[list[LayerParams]], memory: int
                ) -> tuple[dict, list[ray.ObjectRef]]:
        """embed, search, refine and assign; the metrics and the decided source parts."""
        pair, cfg, P = self.pair, self.cfg, self.P
        self.workers = [PartWorker.options(**self.actor_options, memory=memory).remote(
            p, self.part_refs[p], [c.embed for c in self.chans], params, self.actor_cpus,
            self.device)
            for p in range(P)]
        try:
            with self.watch.stage("embed"):
                blocks: list[ray.ObjectRef] = []
                emb = [self._embed(g, blocks) for g in (0, 1)]
                _completed(blocks + emb[0] + emb[1], "embed", "blocks")
            pl = plan(pair, cfg)
            with self.watch.stage("search"):
                forward = self._search("forward", emb[0], pl.searched, 1, emb[1], pl.targets)
                backward = None if pl.sources is None else self._search(
                    "backward", emb[1], pl.targets, 0, emb[0], pl.sources)
                _completed([*forward[0], *(backward[0] if backward else [])], "search",
                           "parts")
            usage = [_report(w, f"part {p}") for p, w in enumerate(self.workers)]
        finally:
            for w in self.workers:
                ray.kill(w)
        dense = (dense_assignment(cfg.assign, pl.rows.size, pl.targets.size)
                 and not cfg.refine.enabled)
        embeddings = ([_embedding.remote(pt, *e) for pt, e in zip(self.parting, emb)]
                      if dense else None)
        with self.watch.stage("refine+assign"):
            finish_cpus = max(node["Resources"].get("CPU", 1) for node in ray.nodes()
                              if node["Alive"])
            out = _finish.options(num_returns=2 + P, num_cpus=finish_cpus).remote(
                self._light_pair(), cfg, pl, self.parting[0], finish_cpus, forward[0],
                forward[1], None if backward is None else backward[0],
                [] if backward is None else backward[1], embeddings, scale(self.chans),
                self.prepared, resume)
            metrics, finish_usage = ray.get(out[:2])
        self.usage += [*usage, finish_usage]
        return metrics, out[2:]

    def report(self) -> dict[str, Any]:
        """What the run's metrics say about the distribution."""
        return {"partitions": self.P, "partitioner": self.parting[0].method,
                "cut_edges": [pt.cut_edges(g.edge_index) for pt, g in
                              zip(self.parting, (self.pair.source, self.pair.target))],
                "device": self.device, "processes": self.usage}

    def _light_pair(self) -> Pair:
        """The pair without node features and names: what the later stages need."""
        strip = dict(features=None, names=None)
        return replace(self.pair, source=replace(self.pair.source, **strip),
                       target=replace(self.pair.target, **strip))

    def _embed(self, g: int, submitted: list[ray.ObjectRef]) -> list[ray.ObjectRef]:
        """Per part, the object reference of graph ``g``'s embedding rows; each layer's
        blocks are added to ``submitted`` (to watch them complete)."""
        P, w, exchange = self.P, self.workers, self.exchange[g]

        def call(method, p: int, send: bool, *args) -> list[ray.ObjectRef]:
            """The part's rows, then (if ``send``) one slice per consumer."""
            n = 1 + len(exchange[p][1]) if send else 1
            out = method.options(num_returns=n).remote(send, *args)
            return [out] if n == 1 else list(out)

        def slice_for(p: int, q: int, h: list[list[ray.ObjectRef]]) -> ray.ObjectRef:
            return h[q][1 + exchange[q][1].index(p)]

        blocks: list[list[ray.ObjectRef]] = [[] for _ in range(P)]
        scales: list[float] = []
        for c, ec in enumerate(spec.embed for spec in self.chans):
            h = [call(w[p].first, p, ec.layers > 0, g, c) for p in range(P)]
            layers = [[x[0] for x in h]] if ec.include_input else []
            for l in range(ec.layers):
                self.events("embed-layer", {"graph": g, "channel": c, "layer": l + 1,
                                              "workers": w})
                log.info("embed: graph %s, channel %d, layer %d/%d on %d parts",
                         "st"[g], c, l + 1, ec.layers, P)
                h = [call(w[p].layer, p, l + 1 < ec.layers, g, c, l, h[p][0],
                          *[slice_for(p, q, h) for q in exchange[p][0]]) for p in range(P)]
                layers.append([x[0] for x in h])
                submitted += layers[-1]
            kept = [layers[-1]] if ec.basic else layers
            for p in range(P):
                blocks[p] += [lay[p] for lay in kept]
            scales += [self.chans[c].weight ** 0.5] * len(kept)
        return [w[p].concat.remote(scales, *blocks[p]) for p in range(P)]

    def _search(self, key: str, queries: list, query_nodes: np.ndarray, base_graph: int,
                base: list, base_nodes: np.ndarray) -> tuple[list, list[np.ndarray]]:
        """Per query part, the merged top-k of its ``query_nodes`` over every shard.

        An IVF ``nprobe`` is tuned first, on the same sample of query nodes as in one process:
        each shard reports the best score it finds for them and the exact best in the shard,
        and the maxima over the shards are what the merged search finds and should find."""
        k, opts, recall = self.cfg.search.k, search_options(self.cfg), self.cfg.search.recall
        qpart = self.parting[1 - base_graph]
        bpart = self.parting[base_graph]
        shard_ids = [base_nodes[bpart.part[base_nodes] == p] for p in range(self.P)]
        shard_rows = [bpart.position[ids] for ids in shard_ids]
        shards = [p for p in range(self.P) if shard_ids[p].size]
        if recall > 0 and opts["kind"] in IVF_KINDS:
            sample = query_nodes[probe_rows(query_nodes.size, self.cfg.seed)]
            sample_rows = [qpart.position[sample[qpart.part[sample] == q]] for q in range(self.P)]

            def measure(nprobe: int) -> tuple[np.ndarray, np.ndarray, int]:
                got = ray.get([self.workers[p].probe.remote(key, k, base[p], shard_rows[p], opts,
                                                            nprobe, sample_rows, *queries)
                               for p in shards])
                return (np.max([f for f, _, _ in got], axis=0),
                        np.max([e for _, e, _ in got], axis=0), max(n for _, _, n in got))

            self.searched[key] = tune_nprobe(measure, opts["nprobe"], recall)
            opts = {**opts, "nprobe": self.searched[key]["nprobe"]}
        merged, rows = [], []
        for q in range(self.P):
            self.events("search", {"direction": key, "part": q, "workers": self.workers})
            nodes = query_nodes[qpart.part[query_nodes] == q]
            hits = [self.workers[p].search.remote(key, k, queries[q], qpart.position[nodes],
                                                  base[p], shard_rows[p], shard_ids[p], opts)
                    for p in shards]
            merged.append(merge_top_k.remote(k, *hits))
            rows.append(nodes)
            log.info("search %s: part %d/%d, %d queries through %d shards", key, q + 1,
                     self.P, nodes.size, len(hits))
        return merged, rows
