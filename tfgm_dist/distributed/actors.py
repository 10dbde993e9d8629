"""What runs in Ray workers: the part actors (embedding rows and a FAISS shard each), the
stand-alone search shards, and the tasks that merge, refine, assign and write."""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

import faiss
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import ray
import torch
import torch.nn.functional as F

from .. import checkpoint, write
from ..assign import (Bidders, Sellers, argmax, auctioned, best_of, is_best_source, listed_score,
                      listing_best, score_span)
from ..auto import Prepared, prepared_by_passes
from ..estimate import Calibration, margins
from ..config import Config, EmbedConfig
from ..embed import (LayerParams, finished, layer, propagate, role_layer,
                     role_partial, transformed)
from ..partition import Partition, partition
from ..features import node_named
from ..graph import Graph, Held
from ..load import load_graph, shares
from ..load.formats import EdgeRows
from ..pipeline import (Content, Pair, Plan, Result, Scored, channels, conclude,
                        content_channels, content_counts, content_rows, evaluate, node_inputs,
                        operators, ordered, refined)
from ..refine import decoding, list_width
from ..search import (IVF_KINDS, Candidates, both_ways, build_index, exact_best, gpu_available,
                      ivf_kind, on_device, probe, search, set_nprobe, taken, trained_index,
                      trained_on)
from ..stopwatch import Stopwatch, peak_rss_bytes, private_rss_bytes
from .cluster import RESTART_HEADROOM, resources
from .consensus import Consensus, merged, transposed_entries
from .halo import GraphPart, exchange, gathered, part_facts, touching, unplanned

log = logging.getLogger("tfgm_dist")

RESTARTS = 3  # times Ray restarts a dead actor and retries a failed call or task
USAGE_EVERY = 0.2  # seconds between samples of a long-lived actor's own memory


class LostState(RuntimeError):
    """A restarted part actor was asked to go on with a refinement or an auction its former
    self held: the driver runs the stages again on fresh actors, as after a lost node."""


@dataclass
class Usage:
    """Seconds per stage and peak memory of one Ray process, for ``metrics.json``.

    ``every``: for a long-lived actor, seconds between samples of its own memory in a
    thread, so that the peak inside a call counts (a part actor of the 1M pair at P = 4
    peaked at 1.4-1.6 GiB of its own during a layer, where the ends of its calls showed
    1.39); without it, memory is sampled as each call ends."""

    role: str
    every: float | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    private: int | None = None  # the largest private_rss_bytes() sampled
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if self.every:
            threading.Thread(target=self._watch, name="tfgm-usage", daemon=True).start()

    def _watch(self) -> None:
        while True:
            self._sample()
            time.sleep(self.every)

    def add(self, stage: str, start: float) -> None:
        self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start
        self._sample()

    def _sample(self) -> None:
        now = private_rss_bytes()
        if now is not None:
            with self._lock:
                self.private = max(now, self.private or 0)

    def report(self) -> dict[str, Any]:
        """``peak_rss_bytes`` counts the object store's pages this process touched;
        ``private_bytes`` is its own memory (its resident set less the shared pages: what
        Ray's memory guide calls a worker's heap), at its sampled peak."""
        self._sample()
        return {"role": self.role, "host": socket.gethostname(),
                "node": ray.get_runtime_context().get_node_id(), "pid": os.getpid(),
                "seconds": self.seconds, "peak_rss_bytes": peak_rss_bytes(),
                "private_bytes": self.private}


def _threads(num_cpus: float) -> int:
    """Set up this Ray worker process for a task or actor of ``num_cpus`` cores."""
    # Arrays from the object store are read-only; no stage writes into its inputs.
    warnings.filterwarnings("ignore", "The given NumPy array is not writable")
    n = max(1, int(num_cpus))
    torch.set_num_threads(n)
    faiss.omp_set_num_threads(n)
    return n


class AuctionSide:
    """One part's side of the distributed one-to-one auction (:func:`.one_to_one`): it bids
    for the part's sources, whose candidate lists it holds, and sells the part's targets.
    The state lives from :meth:`bidders` and :meth:`sellers` to the end of the auction."""

    def __init__(self, role: str) -> None:
        self.usage = Usage(role, every=USAGE_EVERY)
        self.listed: Candidates | None = None  # the part's sources' lists, from bidders()
        self.rows: torch.Tensor | None = None  # and those sources
        self.bidding: Bidders | None = None
        self.selling: Sellers | None = None
        self.adopted: np.ndarray | None = None  # the targets of a handed-over auction
        self.piece: Result | None = None  # decided, not yet concluded

    def span(self, *chunks: tuple[np.ndarray, np.ndarray]) -> tuple[float, float] | None:
        """:func:`~tfgm_dist.assign.score_span` of this part's candidate lists (``chunks``:
        its queries' merged top-k, in order)."""
        return score_span(_listed(chunks))

    def bidders(self, rows: np.ndarray, num_targets: int, span: tuple[float, float],
                home: np.ndarray, parts: int, *chunks: tuple[np.ndarray, np.ndarray]) -> None:
        """Take part in the one-to-one auction with the sources ``rows`` (ascending) and
        their lists ``chunks``; ``home``: the part that sells each target."""
        self.listed = _listed(chunks)
        self.rows = torch.tensor(rows)  # a copy: Ray hands large arrays read-only
        self.bidding = Bidders(self.listed, self.rows, num_targets, span, home, parts)
        self.adopted = None

    def matched(self) -> np.ndarray:
        """The target of each of this part's sources, ``-1`` where unmatched."""
        if self.adopted is not None:
            return self.adopted
        return _held(self.bidding).matched().numpy()

    def sellers(self, nodes: np.ndarray) -> None:
        """Take part in the one-to-one auction as the seller of the targets ``nodes``."""
        self.selling = Sellers(nodes)

    def bid(self, eps: float, *outcome: Any) -> tuple:
        """:meth:`Bidders.bid`: the number of free sources, then the bids for each part."""
        start = time.perf_counter()
        free, bids = _held(self.bidding).bid(eps, *outcome)
        self.usage.add("assign", start)
        return (free, *bids)

    def resolve(self, *bids: Any) -> Any:
        """:meth:`Sellers.resolve`: each part's outcome (one return per part)."""
        start = time.perf_counter()
        outcome = _held(self.selling).resolve(*bids)
        self.usage.add("assign", start)
        return outcome[0] if len(outcome) == 1 else tuple(outcome)

    def entries(self) -> int:
        """The candidate entries of this part's sources (what :meth:`finish` takes over)."""
        return _held(self.bidding).value.size

    def finish(self, num_targets: int, parts: int, *received: Any) -> Any:
        """The whole auction in this process (:func:`~tfgm_dist.assign.auctioned`), on every
        part's lists: ``received`` holds each of the ``parts`` parts' source numbers, then
        all their chunks of lists in the same order. The sources go in ascending order, as
        ties do on the parts, so the matching is theirs. Returns the rounds, then each
        part's targets (for :meth:`adopt`)."""
        start = time.perf_counter()
        rows = np.concatenate(received[:parts])
        order = torch.from_numpy(np.argsort(rows, kind="stable"))
        matched, rounds = auctioned(_listed(received[parts:]).take_rows(order), num_targets)
        got = torch.empty_like(matched)
        got[order] = matched
        self.usage.add("assign", start)
        ends = np.cumsum([0, *(r.size for r in received[:parts])])
        return (rounds, *(got[ends[q]:ends[q + 1]].numpy() for q in range(parts)))

    def adopt(self, matched: np.ndarray) -> None:
        """This part's sources' targets from an auction finished elsewhere (:meth:`finish`)."""
        self.adopted = matched


@dataclass(frozen=True)
class PartRecipe:
    """How a part actor makes its own rows of every channel's input (:meth:`rows`): from
    its nodes alone (``part``, :meth:`Graph.of_nodes`: their names or vectors, a Parquet
    layout's read there), the pair-wide :class:`~tfgm_dist.pipeline.Content`, and where the
    content is structure their ``degrees``. No process then holds every node's names,
    vectors or input rows."""

    part: Graph
    content: Content
    cfg: Config
    structure: bool
    degrees: torch.Tensor | None = None

    def rows(self) -> list[np.ndarray]:
        """:func:`~tfgm_dist.pipeline.content_rows`, then
        :func:`~tfgm_dist.pipeline.content_channels`, of the part's nodes."""
        kind = self.content.kind
        inputs = node_inputs(self.part, kind, self.cfg, self.degrees)
        x = content_rows(self.content, inputs, self.cfg, node_named(self.part))
        return [c.x_s.numpy() for c in content_channels(kind, x, x[:0], self.cfg,
                                                        self.structure)]


@ray.remote(max_restarts=RESTARTS, max_task_retries=RESTARTS)
class PartWorker(AuctionSide):
    """Part ``p`` of both graphs: its embedding rows, layer by layer, its FAISS shard, and
    its side of the one-to-one auction."""

    def __init__(self, p: int, part_s: GraphPart, plan_s: dict[str, Any], part_t: GraphPart,
                 plan_t: dict[str, Any], inputs_s: list[np.ndarray] | PartRecipe,
                 inputs_t: list[np.ndarray] | PartRecipe, specs: list[EmbedConfig],
                 params: list[list[LayerParams]], num_cpus: float, device: str,
                 keep_buffers: bool = True) -> None:
        """``part_s``, ``part_t``: the part of each graph (:func:`part_of_graph`), completed
        by ``plan_s``, ``plan_t``, its halo and degrees (:func:`~.halo.exchange`).
        ``keep_buffers``: whether a layer's stacked rows stay allocated for the next layer
        (:meth:`_stacked_rows`), or go with the call, where memory is short."""
        self.threads = _threads(num_cpus)
        self.p, self.specs, self.device = p, specs, device
        self.parts = (replace(part_s, **plan_s), replace(part_t, **plan_t))
        # per graph, per channel: the part's rows of X, made from a recipe as the graph's
        # embedding starts (:meth:`first`) and let go once it is done (:meth:`concat`): one
        # graph's at a time (a restarted actor makes them again)
        self.given = (inputs_s, inputs_t)
        self.inputs: list[list[np.ndarray] | None] = [None, None]
        self.params = [[q.to(device) for q in channel] for channel in params]
        # the part's rows of each operator, whose columns are the rows a layer receives; with
        # relation roles also those over edges and roles, and its share of the roles' rows
        self.blocks = [g.stacked(g.block()).to(device) for g in self.parts]
        self.role_blocks = [None if not g.num_roles else
                            tuple(b.to(device) for b in g.role_blocks()) for g in self.parts]
        self.buffers: dict[tuple[int, int, int], np.ndarray] = {}  # per graph, width, rows
        self.keep_buffers = keep_buffers
        self.shard = SearchShard(device)
        self.P = 1  # parts of the run, told by :meth:`consensus`
        self.consensuses: list[Consensus | None] = [None, None]  # per direction, refining
        self.refined_lists: list[Candidates | None] = [None, None]  # per direction, refined
        self.decoding_lists: Candidates | None = None  # what the auction maximises, refined
        super().__init__(f"part {p}")

    def ready(self) -> None:
        """Returns once the actor is made."""

    def _out(self, g: int, rows: np.ndarray, send: bool, share: np.ndarray | None = None
             ) -> Any:
        """A layer's result: the part's rows, then the slice for each consumer if ``send``,
        then its ``share`` of the next layer's role rows if any (the call is made with one
        return per item)."""
        out = [rows, *([rows[r] for r in self.parts[g].sends] if send else [])]
        if share is not None:
            out.append(share)
        return out[0] if len(out) == 1 else tuple(out)

    def _made(self, g: int) -> list[np.ndarray]:
        """Graph ``g``'s input rows, per channel: given, or made from the recipe (a bad value
        raises its :class:`InputError` here)."""
        x = self.given[g]
        if not isinstance(x, PartRecipe):
            return x
        rows = x.rows()
        pa.default_memory_pool().release_unused()  # what reading left (0.27 of 1.27 GiB)
        return rows

    def first(self, send: bool, g: int, c: int) -> Any:
        """:math:`F^{(0)}` rows of graph ``g``'s channel ``c``: the normalised input."""
        if self.inputs[g] is None:
            self.inputs[g] = self._made(g)
        rows = F.normalize(torch.from_numpy(self.inputs[g][c]).float(), dim=-1).numpy()
        return self._out(g, rows, send)

    def layer(self, send: bool, g: int, c: int, l: int, own: np.ndarray,
              roles: np.ndarray | None, *needed: np.ndarray) -> Any:
        """:math:`F^{(l)}` rows of graph ``g``'s channel ``c`` from the previous layer's rows:
        ``own`` (this part's) and the slices of the parts in ``needs``. Where the channel
        propagates over relation roles (:meth:`_relational`), also from the previous layer's
        role rows ``roles`` (``None``: the input's, zeros), and if ``send`` the part's share
        of this layer's role rows before :func:`role_rows` adds them up."""
        start = time.perf_counter()
        params, relu = self.params[c][l], self.specs[c].relu
        share = None
        if self._relational(g, c):
            block, shares = self.role_blocks[g]
            if roles is None:
                roles = np.zeros((shares.loops.numel(), own.shape[1]), own.dtype)
            h = transformed(torch.from_numpy(self._stacked_rows(g, own, (*needed, roles)))
                            .to(self.device), params, relu)
            out = finished(propagate(block, h), params)
            if send:  # the roles' self-loops are part 0's to add
                share = role_partial(shares, h[:own.shape[0]],
                                     h[-roles.shape[0]:] if self.p == 0 else None).cpu().numpy()
        else:
            h_halo = torch.from_numpy(self._stacked_rows(g, own, needed)).to(self.device)
            out = layer(self.blocks[g], h_halo, params, relu)
        if self.specs[c].basic:
            out = F.normalize(out + torch.from_numpy(own).to(self.device), dim=-1)
        self.usage.add("embed", start)
        return self._out(g, out.cpu().numpy(), send, share)

    def _relational(self, g: int, c: int) -> bool:
        """Whether channel ``c`` of graph ``g`` propagates over its relation roles too."""
        return self.specs[c].relations and self.role_blocks[g] is not None

    def _stacked_rows(self, g: int, own: np.ndarray, needed: tuple[np.ndarray, ...]
                      ) -> np.ndarray:
        """``[own; *needed]``, the rows graph ``g``'s block multiplies (the role rows last
        where they are among ``needed``), written into an array kept for the layers of that
        width until :meth:`concat` where ``keep_buffers``: a new one each layer cost as much
        as the product (its page faults: 0.9 s of a 1M-node pair's layer at P = 2)."""
        if not needed:
            return own
        rows = own.shape[0] + sum(x.shape[0] for x in needed)
        buffer = self.buffers.get((g, own.shape[1], rows))
        if buffer is None:
            buffer = np.empty((rows, own.shape[1]), own.dtype)
            if self.keep_buffers:
                self.buffers[g, own.shape[1], rows] = buffer
        return np.concatenate([own, *needed], out=buffer)

    def concat(self, g: int, scales: list[float], *blocks: np.ndarray) -> np.ndarray:
        """The part's embedding rows of graph ``g``: its per-layer and per-channel blocks
        side by side, each times its channel's :math:`\\sqrt{w}` in ``scales``, written in
        place (scaled copies first had doubled the rows: 2.3 GB at a time in each part
        actor of the 3M pair at P = 4). The graph is embedded: the layers' buffers and its
        input rows are let go (0.38 GB there)."""
        self.buffers.clear()
        self.inputs[g] = None
        out = np.empty((blocks[0].shape[0], sum(b.shape[1] for b in blocks)), np.float32)
        at = 0
        for b, f in zip(blocks, scales):
            np.multiply(b, f, out=out[:, at:at + b.shape[1]])
            at += b.shape[1]
        return out

    def rows_of(self, x: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """``x[rows]`` of this part's embedding ``x``: its share of a training sample, a
        chunk of its queries for the shards to search, or the targets another part's
        decoding scores need (:meth:`decode_on`)."""
        return x[rows]

    def index_kind(self, kind: str) -> str:
        """The IVF index kind this actor's FAISS builds for ``kind``
        (:func:`~tfgm_dist.search.ivf_kind`)."""
        return ivf_kind(kind, gpu_available())

    def train(self, kind: str, n: int, nlist: int | None, parts: int, *received: np.ndarray
              ) -> np.ndarray:
        """A trained, empty IVF index of ``kind`` (:meth:`index_kind`) for a base of ``n``
        rows sharded over the parts (:func:`~tfgm_dist.search.trained_index`), serialised:
        ``received`` holds each of the ``parts`` parts' sample positions, then their rows
        (:meth:`rows_of`) in the same order; the sample is trained on in the order of its
        positions, as in one process."""
        start = time.perf_counter()
        order = np.argsort(np.concatenate(received[:parts]), kind="stable")
        sample = np.concatenate(received[parts:])[order]
        index = trained_index(sample, n, kind, nlist)
        self.usage.add("search", start)
        return faiss.serialize_index(index)

    def probe(self, key: str, k: int, base: np.ndarray, base_rows: np.ndarray, options: dict,
              trained: np.ndarray | None, nprobe: int, rows: list[np.ndarray],
              *queries: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """:meth:`SearchShard.probe` of the sample queries, rows ``rows[q]`` of each query
        part ``queries[q]``."""
        start = time.perf_counter()
        probes = np.concatenate([x[r] for x, r in zip(queries, rows)])
        out = self.shard.probe(key, k, base, base_rows, options, nprobe, probes, trained)
        self.usage.add("search", start)
        return out

    def search(self, key: str, k: int, queries: np.ndarray, base: np.ndarray,
               base_rows: np.ndarray, base_ids: np.ndarray, options: dict,
               trained: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`SearchShard.search` of ``queries``, one chunk of a query part."""
        start = time.perf_counter()
        out = self.shard.search(key, k, queries, base, base_rows, base_ids, options, trained)
        self.usage.add("search", start)
        return out

    def list_width(self, *chunks: tuple[np.ndarray, np.ndarray]) -> int:
        """:func:`~tfgm_dist.refine.list_width` of this part's searched lists."""
        return list_width(_listed(chunks))

    def consensus(self, d: int, parts: int, rows: np.ndarray, target_parting: Partition,
                  width: int, seeds: tuple[np.ndarray, np.ndarray] | None, options: dict,
                  *chunks: tuple[np.ndarray, np.ndarray]) -> tuple:
        """Start direction ``d``'s refinement (0: the source graph's rows, 1: the target's)
        of this part's rows, whose searched lists are ``chunks`` (of the nodes ``rows``);
        ``seeds`` pinned, ``target_parting`` the other graph's partition, ``options`` the
        rest of :class:`Consensus`'s arguments. Returns per part what it will send there
        each step, then per part the rows of its :math:`o_t` it needs."""
        start = time.perf_counter()
        nodes = self.blocks[d].nodes.numpy()
        lists = _listed(chunks).scatter_rows(torch.from_numpy(np.searchsorted(nodes, rows)),
                                             nodes.size)
        fixed = None
        if seeds is not None:
            mine = np.isin(seeds[0], nodes)
            fixed = (torch.from_numpy(np.searchsorted(nodes, seeds[0][mine])),
                     torch.from_numpy(seeds[1][mine]))
        self.P = parts
        self.consensuses[d] = Consensus(lists, nodes, target_parting.part,
                                        target_parting.position, parts, width, fixed=fixed,
                                        **options)
        out = self.consensuses[d]
        self.usage.add("refine", start)
        return (*out.patterns(), *out.needs())

    def receive(self, d: int, *sent: Any) -> None:
        """As target part of direction ``d``: what each part will send (:meth:`consensus`'s
        returns for this part, its patterns then its needs)."""
        P = self.P
        _held(self.consensuses[d]).receive(list(sent[:P]), list(sent[P:]),
                                           self.blocks[1 - d].nodes.numel())

    def indicators(self, send: bool, d: int) -> Any:
        """This step's indicators of the part's source rows, normalised: the input of
        :math:`\\psi_2` (then, if ``send``, the slices the other parts' halos hold)."""
        start = time.perf_counter()
        rows = F.normalize(_held(self.consensuses[d]).draw(), dim=-1).numpy()
        self.usage.add("refine", start)
        return self._out(d, rows, send)

    def contributions(self, d: int) -> Any:
        """Per part, this step's entries of :math:`S^\\top r_s`
        (:meth:`Consensus.contributions`)."""
        start = time.perf_counter()
        out = _held(self.consensuses[d]).contributions()
        self.usage.add("refine", start)
        return out[0] if len(out) == 1 else tuple(out)

    def transposed(self, send: bool, d: int, *received: tuple[np.ndarray, np.ndarray]) -> Any:
        """This part's rows of :math:`r_t = S^\\top r_s`, normalised (the other graph's
        :math:`\\psi_2` input), and if ``send`` the slices for the halos."""
        start = time.perf_counter()
        rows = F.normalize(_held(self.consensuses[d]).transposed(*received), dim=-1).numpy()
        self.usage.add("refine", start)
        return self._out(1 - d, rows, send)

    def serve(self, d: int, *blocks: np.ndarray) -> Any:
        """Per part, the rows of this part's :math:`o_t` (its :math:`\\psi_2` blocks side by
        side) that its lists name."""
        out = _held(self.consensuses[d]).serve(np.concatenate(blocks, axis=1))
        return out[0] if len(out) == 1 else tuple(out)

    def update(self, d: int, own: int, *blocks: np.ndarray) -> None:
        """Add this step's cosines: ``blocks`` are the ``own`` :math:`\\psi_2` blocks of the
        part's :math:`o_s`, then each part's served :math:`o_t` rows."""
        start = time.perf_counter()
        _held(self.consensuses[d]).update(np.concatenate(blocks[:own], axis=1), *blocks[own:])
        self.usage.add("refine", start)

    def refined(self, d: int) -> Any:
        """Ends direction ``d``: its refined lists kept, and per part the entries that list
        that part's nodes, for the other direction's merge (:func:`transposed_entries`)."""
        start = time.perf_counter()
        side = _held(self.consensuses[d])
        self.refined_lists[d], self.consensuses[d] = side.result(), None
        out = transposed_entries(self.refined_lists[d], self.blocks[d].nodes.numpy(),
                                 side.home, self.P)
        self.usage.add("refine", start)
        return out[0] if len(out) == 1 else tuple(out)

    def merged(self, d: int, *received: tuple[np.ndarray, np.ndarray, np.ndarray]) -> None:
        """:func:`~tfgm_dist.refine.merge` of direction ``d``'s rows with the other
        direction's entries that list them."""
        start = time.perf_counter()
        self.refined_lists[d] = merged(_held(self.refined_lists[d]),
                                       self.blocks[d].nodes.numpy(), *received)
        self.usage.add("refine", start)

    def wanted(self, target_parting: Partition) -> Any:
        """Per target part, the rows there of the targets on this part's merged refined
        source lists (increasing target numbers): the embedding rows :meth:`decode_on`
        needs."""
        targets = self._listed_targets(target_parting.part)
        out = tuple(target_parting.position[t] for t in targets)
        return out[0] if len(out) == 1 else out

    def _listed_targets(self, part: np.ndarray) -> list[np.ndarray]:
        index = _held(self.refined_lists[0]).index
        targets = np.unique(index[index >= 0].numpy())
        return [targets[part[targets] == q] for q in range(self.P)]

    def decode_on(self, weight: float, o_s: np.ndarray, target_parting: Partition,
                  *served: np.ndarray) -> None:
        """:func:`~tfgm_dist.refine.decoding` of this part's merged refined source lists:
        ``o_s`` this part's source embedding rows, ``served`` each target part's rows of
        the listed targets (:meth:`wanted`)."""
        start = time.perf_counter()
        lists = _held(self.refined_lists[0])
        targets = np.concatenate(self._listed_targets(target_parting.part))  # as served
        order = np.argsort(targets)  # the served rows by increasing target number
        rows_t = np.searchsorted(targets[order], lists.index.numpy())  # padding: masked after
        self.decoding_lists = decoding(lists, torch.from_numpy(o_s),
                                       torch.from_numpy(np.concatenate(served)[order]), weight,
                                       torch.from_numpy(rows_t))
        self.usage.add("refine", start)

    def lists_of(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The decoding lists of the source nodes ``rows`` (this part's): what the auction
        maximises."""
        c = _held(self.decoding_lists).take_rows(self._own_rows(rows))
        return c.scores.numpy(), c.index.numpy()

    def _own_rows(self, rows: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.searchsorted(self.blocks[0].nodes.numpy(), rows))

    def best_sources(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This part's targets that have a best source after refinement, that source and
        its score, to tell mutual matches by (as :meth:`AuctionSide.decided` takes them)."""
        lists = _held(self.refined_lists[1])
        best = argmax(lists)
        has = best >= 0
        top = lists.scores.max(1).values if lists.k else torch.zeros(0)
        return (self.blocks[1].nodes[has].numpy(), best[has].numpy(), top[has].numpy())

    def merge(self, k: int, *shards: tuple[np.ndarray, np.ndarray]
              ) -> tuple[np.ndarray, np.ndarray]:
        """:func:`merge_top_k` of one chunk of this part's queries, here rather than in a task:
        a new Ray worker spends about 3 s of CPU importing this module, this actor none."""
        start = time.perf_counter()
        out = merge_top_k(k, *shards)
        self.usage.add("search", start)
        return out

    def listing_best(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:func:`~tfgm_dist.assign.listing_best` of this part's lists: for each target
        they name, its best source among this part's rows, and that score."""
        return tuple(t.numpy() for t in listing_best(_held(self.listed), _held(self.rows)))

    def decided(self, scale: float, num_targets: int,
                *best: tuple[np.ndarray, np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
        """Ends the auction: this part's rows decoded, kept for :meth:`conclude`. ``best``,
        each part's targets with their best source and its score (:meth:`best_sources`
        after refinement, else :meth:`listing_best`), tells which matches are mutual;
        returns the margins and that, for a confidence fitted on every part's rows
        (:func:`~tfgm_dist.estimate.on_mutual`)."""
        start = time.perf_counter()
        rows = _held(self.rows)
        # refined: the auction bid on the decoding scores, the rows are ranked by probability
        listed = (_held(self.listed) if self.decoding_lists is None
                  else _held(self.refined_lists[0]).take_rows(self._own_rows(rows.numpy())))
        matched = torch.from_numpy(self.matched())
        targets, sources, _ = best_of(*(torch.from_numpy(np.concatenate(a)) for a in zip(*best)))
        mutual = is_best_source(matched, rows, targets, sources, num_targets)
        self.piece = Result(rows, listed, matched, listed_score(listed, matched), scale=scale,
                            mutual=mutual)
        self.bidding = self.selling = self.adopted = None
        self.usage.add("assign", start)
        return margins(self.piece).numpy(), mutual.numpy()

    def conclude(self, q: int, gold: tuple[np.ndarray, np.ndarray] | None, prepared: Prepared,
                 resume: write.Location, fit: Calibration | None = None) -> tuple[Result, dict]:
        """This part's decided rows with their confidence (from ``fit`` where the run
        calibrates on its own mutual matches, else as ``prepared`` says), kept in
        ``resume`` (see :mod:`tfgm_dist.checkpoint`); and their evaluation, for
        :func:`~tfgm_dist.metrics.combined`."""
        start = time.perf_counter()
        piece = _held(self.piece)
        if gold is not None:
            piece.metrics = evaluate(piece.candidates, piece.rows, piece.matched, gold)
        if fit is not None:
            piece.confidence = fit(margins(piece))
        piece = prepared.finish_part(piece, gold)
        found, piece.metrics = piece.metrics, {}
        checkpoint.save_piece(resume, q, piece)
        self.piece = None
        self.usage.add("assign", start)
        return piece, found

    def report(self) -> dict[str, Any]:
        return {**self.usage.report(), "threads": self.threads, "device": self.device}


def _held(side: Any) -> Any:
    if side is None:
        raise LostState("this part's actor was restarted in the middle of a stage whose "
                        "state it held (the refinement or the auction)")
    return side


def _listed(chunks: tuple[tuple[np.ndarray, np.ndarray], ...]) -> Candidates:
    """One part's candidate lists from its chunks' merged top-k."""
    return Candidates(torch.from_numpy(np.concatenate([s for s, _ in chunks])),
                      torch.from_numpy(np.concatenate([i for _, i in chunks])))


def merge_top_k(k: int, *shards: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best of the per-shard top-k lists of one query part (canonical order)."""
    c = Candidates.sorted(torch.from_numpy(np.concatenate([s for s, _ in shards], 1)),
                          torch.from_numpy(np.concatenate([i for _, i in shards], 1)))
    return c.scores[:, :k].numpy(), c.index[:, :k].numpy()


class SearchShard:
    """One shard of a sharded search: FAISS indexes of some rows of a base matrix, each built
    on first use under a key and cached (a restarted actor builds the same one again).

    The pipeline's part actors search their part's rows with it, and :class:`Shard` actors
    the rows they were given (the supervised kNN); :func:`merge_top_k` merges the shards'
    lists into one index's, bit for bit for a flat index (:func:`~tfgm_dist.search.search`).
    On a GPU that FAISS cannot use (faiss-cpu), a flat search is torch's there
    (:func:`~tfgm_dist.search.both_ways`, forward only), with the same lists.
    """

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        self.indexes: dict[str, Any] = {}
        self.exact: dict[str, np.ndarray] = {}

    def _index(self, key: str, base: np.ndarray, base_rows: np.ndarray, options: dict,
               trained: np.ndarray | None):
        if key not in self.indexes:
            self.indexes[key] = build_index(
                taken(base, base_rows), **options,
                trained=None if trained is None else faiss.deserialize_index(trained))
        return self.indexes[key]

    def probe(self, key: str, k: int, base: np.ndarray, base_rows: np.ndarray, options: dict,
              nprobe: int, probes: np.ndarray, trained: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, int]:
        """For sample queries ``probes``: the best score this shard's index finds with
        ``nprobe`` lists, the exact best score in the shard, and the shard's number of lists
        (:func:`~tfgm_dist.search.tune_nprobe` takes the maxima over the shards).
        ``trained``: a serialised IVF index every shard copies (:meth:`PartWorker.train`),
        else each shard trains its own."""
        index = self._index(key, base, base_rows, options, trained)
        if key not in self.exact:
            self.exact[key] = exact_best(taken(base, base_rows), probes)
        found, nlist = probe(index, probes, k, nprobe)
        return found, self.exact[key], nlist

    def search(self, key: str, k: int, queries: np.ndarray, base: np.ndarray,
               base_rows: np.ndarray, base_ids: np.ndarray, options: dict,
               trained: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` of ``queries`` among ``base[base_rows]`` (node numbers ``base_ids``),
        with ``options["nprobe"]`` lists for an IVF index (``trained``: as in :meth:`probe`)."""
        if on_device(options["kind"], self.device):
            c, _ = both_ways(queries, taken(base, base_rows), k, ids_s=None, ids_t=base_ids,
                             device=self.device)
            return c.scores.numpy(), c.index.numpy()
        index = self._index(key, base, base_rows, options, trained)
        if options["kind"] in IVF_KINDS:
            set_nprobe(index, options["nprobe"])
        c = search(index, queries, k, ids=base_ids)
        return c.scores.numpy(), c.index.numpy()


@ray.remote(max_restarts=RESTARTS, max_task_retries=RESTARTS)
class Shard:
    """Some rows of a matrix (node numbers ``ids``) as one :class:`SearchShard`, held by one
    actor."""

    def __init__(self, x: np.ndarray, ids: np.ndarray, options: dict,
                 trained: np.ndarray | None, num_cpus: float) -> None:
        _threads(num_cpus)
        self.x, self.ids, self.options, self.trained = x, ids, options, trained
        self.shard = SearchShard()

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        return self.shard.search("x", k, queries, self.x, np.arange(self.x.shape[0]), self.ids,
                                 self.options, self.trained)


class ShardedIndex:
    """The rows of ``x`` split into ``shards`` FAISS indexes on Ray actors; calling it with
    ``(queries, k)`` merges the per-shard top-k into :class:`Candidates`, equal to one
    index's for exact (``flat``) indexes, and an IVF index is trained once, here, for every
    shard to copy (:func:`~tfgm_dist.search.trained_index`). The supervised kNN searches its
    labelled nodes so."""

    def __init__(self, x: np.ndarray, shards: int, options: dict) -> None:
        cpus, _ = resources()
        n, trained = x.shape[0], None
        if options["kind"] in IVF_KINDS:
            kind = ivf_kind(options["kind"], gpu_available())
            trained = ray.put(faiss.serialize_index(
                trained_on(x, kind, options["nlist"], options["seed"])))
        bounds = np.linspace(0, n, shards + 1).astype(np.int64)
        self.actors = [Shard.options(num_cpus=cpus / shards * RESTART_HEADROOM,
                                     scheduling_strategy="SPREAD").remote(
            x[a:b], np.arange(a, b), options, trained, cpus / shards)
            for a, b in zip(bounds, bounds[1:])]
        log.info("search: %d rows in %d shards", x.shape[0], shards)

    def __call__(self, queries: np.ndarray, k: int) -> Candidates:
        q = ray.put(np.ascontiguousarray(queries, dtype=np.float32))
        scores, index = merge_top_k(k, *ray.get([a.search.remote(q, k) for a in self.actors]))
        return Candidates(torch.from_numpy(scores), torch.from_numpy(index))

    def close(self) -> None:
        for a in self.actors:
            ray.kill(a)


def _gather(lists: list[tuple[np.ndarray, np.ndarray]], rows: list[np.ndarray], n: int
            ) -> Candidates:
    """One ``n``-row candidate matrix from per-part lists of the node numbers ``rows``."""
    return _listed(lists).scatter_rows(torch.from_numpy(np.concatenate(rows)), n)


@ray.remote(max_retries=RESTARTS)
def role_rows(params: LayerParams, spec: EmbedConfig, previous: np.ndarray | None,
              *partials: np.ndarray) -> np.ndarray:
    """A layer's rows of a graph's relation roles, ``[num_roles, d]``, from every part's
    :func:`~tfgm_dist.embed.role_partial` (:meth:`PartWorker.layer`) and the ``previous``
    layer's rows (``None``: the input's, zeros): :func:`~tfgm_dist.embed.role_layer`."""
    _threads(1)
    return role_layer([torch.from_numpy(x) for x in partials], params,
                      None if previous is None else torch.from_numpy(previous),
                      spec.basic).numpy()


def bare(graph: Graph, edges: Any, weights: Any, roles: Any) -> Graph:
    """``graph`` without its edges, weights and roles, which the handles ``edges``,
    ``weights`` and ``roles`` stand for (:class:`~tfgm_dist.graph.Held`)."""
    return replace(graph, edge_index=torch.zeros(2, 0, dtype=torch.long), edge_weight=None,
                   roles=None, held=Held(edges, weights, roles, graph.num_edges,
                                         graph.num_roles))


def _joined(refs: list | None, axis: int) -> torch.Tensor | None:
    """The blocks behind ``refs`` (:class:`~tfgm_dist.graph.Held`) as one tensor."""
    arrays = [] if refs is None else ray.get(refs)
    if not arrays or arrays[0] is None:
        return None
    with warnings.catch_warnings():  # torch warns of every read-only array it wraps
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arrays[0] if len(arrays) == 1 else
                                np.concatenate(arrays, axis=axis))


def whole_graph(graph: Graph) -> Graph:
    """``graph`` with its held edges, weights and roles read back from the object store
    (one block read-only, not copied; several joined): what a task that needs a whole graph
    works on."""
    if graph.held is None:
        return graph
    h = graph.held
    return replace(graph, edge_index=_joined(h.edges, 1), edge_weight=_joined(h.weights, 0),
                   roles=_joined(h.roles, 1), held=None)


def apart(pair: Pair) -> tuple[Pair, tuple[Held | None, Held | None]]:
    """``pair`` without its graphs' :class:`~tfgm_dist.graph.Held` references, and those
    references: a task takes them as an argument of their own (:func:`whole_pair`).
    References inside an argument large enough to go through the object store, as a
    graph's ids make a pair, stayed counted in the store after the job (8 objects a seeded
    job at P = 2, job after job for a long-lived runner)."""
    s, t = (replace(g, held=None) for g in (pair.source, pair.target))
    return replace(pair, source=s, target=t), (pair.source.held, pair.target.held)


def whole_pair(pair: Pair, held: tuple[Held | None, Held | None]) -> Pair:
    """``pair`` (:func:`apart`) with both graphs' edges read back from ``held``
    (:func:`whole_graph`)."""
    return replace(pair, source=whole_graph(replace(pair.source, held=held[0])),
                   target=whole_graph(replace(pair.target, held=held[1])))


# A worker that loaded goes on to run the next tasks (a partition, a part's edges): with
# max_calls = 1 each of these tasks started a worker of its own, importing torch again, and
# the test suite's Ray runs took 4-5 s more each (yeast at P = 2: 17.0 -> 21.7 s). The
# graph's arrays leave the worker with its return values.
@ray.remote(max_retries=RESTARTS, num_returns=4)
def load_held(path: str, fmt: str | None, cfg: Config, is_target: bool) -> tuple:
    """One graph of a text format loaded (:func:`~tfgm_dist.load.load_graph`) and
    :func:`~tfgm_dist.pipeline.ordered` in this task: the graph :func:`bare` and this
    process's usage, then its edges, weights and roles as arrays (``None`` where it has
    none), each an object of its own that the caller owns."""
    start, usage = time.perf_counter(), Usage(f"load {'target' if is_target else 'source'}")
    g = ordered(load_graph(path, fmt, cfg.job.columns, deferred=True), cfg, is_target)
    arrays = [None if t is None else t.numpy() for t in (g.edge_index, g.edge_weight, g.roles)]
    usage.add("load", start)
    return ((bare(g, None, None, None), usage.report()), *arrays)


@ray.remote(max_retries=RESTARTS, num_returns=2)
def read_share(layout: shares.Plan, share: shares.Share, role: str) -> tuple:
    """A share of a Parquet layout's edge rows read and checked here
    (:func:`~tfgm_dist.load.shares.read`): first the ids and relations it met
    (:func:`~tfgm_dist.load.shares.met`), its row count and this process's usage, then
    the rows, an object of their own."""
    start, usage = time.perf_counter(), Usage(role)
    rows = shares.read(layout, share)
    met = shares.met(rows, layout.files.edges_path, layout.files.nodes is not None)
    usage.add("load", start)
    return (met, rows.num_rows, usage.report()), rows


@ray.remote(max_retries=RESTARTS)
def line_count(path: str, start: int, end: int) -> int:
    """:func:`~tfgm_dist.load.shares.line_count` of a text file's bytes here."""
    return shares.line_count(Path(path), start, end)


@ray.remote(max_retries=RESTARTS, num_returns=2)
def read_text_share(plan: shares.TextPlan, r: int, first_line: int, role: str) -> tuple:
    """Range ``r`` of a text edge list read and checked here
    (:func:`~tfgm_dist.load.shares.text_share`): first the distinct ids it met, whether all
    are integers, its row count and this process's usage, then the rows, an object of
    their own."""
    start, usage = time.perf_counter(), Usage(role)
    rows, integers = shares.text_share(plan, r, first_line)
    met = pc.unique(pa.concat_arrays([rows.src, rows.dst]))
    usage.add("load", start)
    return (met, integers, rows.num_rows, usage.report()), rows


@ray.remote(max_retries=RESTARTS)
def number_share(rows: EdgeRows, edges_path: Path, offset: int, listed_in: Path,
                 ids: pa.Array, relations: pa.Array | None, blocks: int) -> tuple:
    """:func:`~tfgm_dist.load.shares.numbered` here: the self-loops dropped, then each
    block's :class:`~tfgm_dist.load.shares.Piece`. Called with ``num_returns=1 + blocks``."""
    loops, pieces = shares.numbered(rows, edges_path, offset, listed_in, ids, relations,
                                    blocks)
    return (loops, *pieces)


@ray.remote(max_retries=RESTARTS, num_returns=4)
def join_block(num_nodes: int, role: str, *pieces: shares.Piece) -> tuple:
    """One block of a graph from every share's piece of it
    (:func:`~tfgm_dist.load.shares.joined`): first its edge count, the repeated edges it
    dropped and this process's usage, then its edges, weights and roles, an object each."""
    start, usage = time.perf_counter(), Usage(role)
    block, dropped = shares.joined(list(pieces), num_nodes)
    usage.add("load", start)
    return ((block.edges.shape[1], dropped, usage.report()), block.edges, block.weights,
            block.roles)


@ray.remote(max_retries=RESTARTS, num_returns=2)
def parted(held: Held, num_nodes: int, parts: int, cfg: Config, role: str) -> tuple:
    """A held graph of ``num_nodes`` nodes (its :class:`~tfgm_dist.graph.Held`, not the
    graph: a reference inside an argument large enough to go through the object store, as a
    graph's ids make it, stayed counted in Ray's store after the job, the blocks' 8-12
    objects a job for a long-lived runner) partitioned into ``parts`` here
    (:func:`~tfgm_dist.partition.partition`): streaming, the default, it reads the graph's
    blocks of edges one at a time; METIS and RCM read it whole. Returns this process's
    usage (as ``role``), then the :class:`Partition`, an object of its own that the driver
    reads and passes on as it is (a copy put again took 0.1 GiB of the driver at 3M
    nodes)."""
    start, usage = time.perf_counter(), Usage(role)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for ref in held.edges:
            src, dst = ray.get(ref)
            yield src, dst

    streams = cfg.ray.partitioner in ("auto", "streaming")
    edges = None if streams else _joined(held.edges, 1)
    parting = partition(edges, num_nodes, parts, seed=cfg.seed, method=cfg.ray.partitioner,
                        blocks=blocks)
    usage.add("partition", start)
    return usage.report(), parting


@ray.remote(max_retries=RESTARTS)
def split_block(edges: np.ndarray, weights: np.ndarray | None, roles: np.ndarray | None,
                parting: Partition) -> shares.Piece | tuple[shares.Piece, ...]:
    """One block of a held graph cut by part here: for each part its
    :class:`~tfgm_dist.load.shares.Piece`, the block's edges with an end in it, their
    weights, and the relation roles (``None``: not asked for) of its nodes
    (:func:`~.halo.touching`). Called with ``num_returns`` the number of parts: each part's
    task (:func:`part_of_graph`) reads its pieces alone, and no task reads every block."""
    block = shares.Piece(edges, weights, roles)
    out = tuple(touching(p, block, parting.part) for p in range(parting.num_parts))
    return out[0] if len(out) == 1 else out


@ray.remote(max_retries=RESTARTS, num_returns=2)
def part_of_graph(p: int, parting: Partition, num_nodes: int, num_roles: int, cfg: Config,
                  distinct: bool, role: str, *pieces: shares.Piece) -> tuple:
    """Part ``p`` of a held graph from its piece of every block (:func:`split_block`), here,
    not in the driver. Returns what it finds in them (:func:`~.halo.part_facts`, the
    degree encoding's degrees if ``distinct``) and this process's usage, then the part's
    :class:`~.halo.GraphPart` without its halo (:func:`~.halo.unplanned`), an object of its
    own that its actor completes with :func:`~.halo.exchange`'s fields."""
    start, usage, ec = time.perf_counter(), Usage(role), cfg.embed
    piece = shares.Piece(np.concatenate([x.edges for x in pieces], axis=1),
                         None if pieces[0].weights is None else
                         np.concatenate([x.weights for x in pieces]),
                         None if not num_roles else
                         np.concatenate([x.roles for x in pieces], axis=1))
    gp = unplanned(p, parting, num_nodes, ec.operator, ec.self_loops, piece, num_roles)
    facts = part_facts(gp, parting.part, distinct)
    usage.add("partition", start)
    return (facts, usage.report()), gp


@ray.remote(max_retries=RESTARTS)
def exchanged(parting: Partition, num_nodes: int, num_roles: int, self_loops: bool,
              role: str, *found: tuple) -> tuple:
    """The parts' halo exchange planned here from what each part found
    (:func:`part_of_graph`'s first return; :func:`~.halo.exchange`), not in the driver: at
    3M nodes and P = 4 the halos, their gathers and the degrees it read and put for the
    parts took the driver from 1.0 to 1.8 GiB. Called with ``num_returns`` one more than
    the parts: first what the driver keeps (each part's ``needs`` and ``consumers``, the
    edges cut, the degree encoding's degrees where the parts found them, the parts' and this
    process's usage), then each part's fields, which its actor completes its
    :class:`~.halo.GraphPart` with; as returns of a task, a lost one is made again."""
    start, usage = time.perf_counter(), Usage(role)
    facts, used = zip(*found)
    fields = exchange(list(facts), parting, num_nodes, num_roles, self_loops)
    distinct = None if facts[0].distinct is None else \
        gathered([f.distinct for f in facts], parting)
    usage.add("partition", start)
    kept = {"exchange": [(f["needs"], f["consumers"]) for f in fields],
            "cut": sum(f.cut for f in facts), "distinct": distinct,
            "usage": [*used, usage.report()]}
    return (kept, *fields)


@ray.remote(max_retries=RESTARTS)
def part_counts(part: Graph, degrees: torch.Tensor | None, kind: str, cfg: Config,
                num_cpus: float) -> Any:
    """The :func:`~tfgm_dist.pipeline.content_counts` of the nodes of one part (``part``,
    :meth:`Graph.of_nodes`; ``degrees`` theirs), read here where they are deferred."""
    _threads(num_cpus)
    return content_counts(kind, node_inputs(part, kind, cfg, degrees))


# max_calls = 1: the worker exits after it, giving back the whole pair's memory
@ray.remote(max_retries=RESTARTS, max_calls=1)
def prepare_whole(pair: Pair, held: tuple[Held | None, Held | None], asked: Config,
                  cfg: Config, report: dict[str, Any], num_cpus: float) -> tuple:
    """:func:`~tfgm_dist.auto.prepared_by_passes` of the whole ``pair`` in this task, with
    the user's settings ``asked`` and what the driver settled of them (``cfg``,
    ``report``): the held-out folds, the choices and the bootstrapping passes. Returns the
    seeds and the hints of the final pass, whether the names read from the ids were dropped
    (:func:`~tfgm_dist.auto.unnamed`), the settings, the :class:`Prepared`, the stages'
    seconds and this process's usage: the pair itself, the passes' embeddings and lists
    stay here."""
    _threads(num_cpus)
    usage, watch = Usage("prepare"), Stopwatch()
    out, cfg, prepared = prepared_by_passes(whole_pair(pair, held), asked, cfg, report, watch)
    usage.seconds = watch.seconds
    read = [g.names_from_ids for g in (pair.source, pair.target)]
    dropped = any(read) and read != [g.names_from_ids for g in (out.source, out.target)]
    return out.seeds, out.hints, dropped, cfg, prepared, watch.seconds, usage.report()


# max_calls = 1: the worker exits after it, giving back the whole pair's memory
@ray.remote(max_retries=RESTARTS, max_calls=1)
def anchored_inputs(pair: Pair, held: tuple[Held | None, Held | None], cfg: Config,
                    nodes: list[list[np.ndarray]], num_cpus: float) -> tuple:
    """The channels of a pair with seeds or hints (:func:`~tfgm_dist.pipeline.channels`:
    seed rows tied, the anchors of seeds and hints), made in this task from the whole
    pair: the channels without their rows, then per graph and part the part's rows of
    every channel (``nodes[g][p]``, node numbers), each its own object."""
    _threads(num_cpus)
    chans = channels(whole_pair(pair, held).with_content(), cfg)
    rows = [[(c.x_s, c.x_t)[g][torch.from_numpy(at)].numpy() for c in chans] for g in (0, 1)
            for at in nodes[g]]
    # new empty rows: a view of none would pickle the whole matrix it views
    empty = [replace(c, x_s=c.x_s.new_empty((0, c.x_s.size(1))),
                     x_t=c.x_t.new_empty((0, c.x_t.size(1)))) for c in chans]
    return (empty, *rows)


@ray.remote(max_retries=RESTARTS)
def finish(pair: Pair, held: tuple[Held | None, Held | None], cfg: Config, pl: Plan,
           part_s: Partition, num_cpus: float, forward: list, forward_rows: list[np.ndarray],
           backward: list | None, backward_rows: list[np.ndarray], embeddings: list | None,
           score_scale: float, prepared: Prepared, resume: write.Location) -> tuple:
    """refine + assign on the merged candidates of a pair whose edges are held
    (:func:`whole_pair`); the result cut into the source parts, which are also kept in
    ``resume`` (see :mod:`tfgm_dist.checkpoint`)."""
    _threads(num_cpus)
    usage, watch = Usage("refine+assign"), Stopwatch()
    pair = whole_pair(pair, held)
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
        pieces.append(result.take_rows(torch.from_numpy(which == q)))
        checkpoint.save_piece(resume, q, pieces[-1])
    checkpoint.save_done(resume, result.metrics, part_s.num_parts)
    return (result.metrics, usage.report(), *pieces)


@ray.remote(max_retries=RESTARTS)
def write_part(stage: write.Location, q: int, pair: Pair, piece, top_k: int,
               min_confidence: float, run: dict) -> tuple:
    """Write source part ``q``'s rows as file ``q`` of the staged dataset."""
    start, usage = time.perf_counter(), Usage(f"write {q}")
    entry = write.write_matches(stage, write.match_table(pair, piece, top_k, min_confidence), run,
                                part=q)
    usage.add("write", start)
    return entry, usage.report()


@ray.remote
def gathered_embedding(parting: Partition, *parts: np.ndarray) -> np.ndarray:
    """A whole graph's embedding from its parts' rows (only for the dense Hungarian)."""
    out = np.empty((parting.part.size, parts[0].shape[1]), dtype=np.float32)
    for p, rows in enumerate(parts):
        out[parting.nodes(p)] = rows
    return out


def usage_of(worker: ray.actor.ActorHandle, role: str) -> dict[str, Any]:
    """An actor's usage; an actor being restarted after a lost node may not answer, which
    must not fail a run whose results are already in."""
    try:
        return ray.get(worker.report.remote(), timeout=30)
    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
            ray.exceptions.GetTimeoutError) as e:
        return {"role": role, "unavailable": str(e).splitlines()[0]}
