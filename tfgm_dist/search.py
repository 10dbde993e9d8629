"""Stage 4, search: top-k targets per source by inner product, with FAISS.

The embeddings are concatenations of L2-normalised per-layer blocks, so one inner product
is the sum of the per-layer cosines (principle P1). FAISS does every nearest-neighbour
search of the project: exact (``flat``) by default; ``ivf``, ``ivfpq`` or ``hnsw`` for scale;
on a GPU when faiss-gpu sees one. Sources are streamed through the index in blocks, so
memory is bounded by ``block x k`` results, never by a dense ``|Vs| x |Vt|`` matrix.

``ivfpq`` is the million-node index: IVF lists scanned with 4-bit product-quantisation codes
(FAISS fast-scan), whose ``REFINE_FACTOR * k`` best are re-ranked with exact inner products
(:class:`Reranked`), so its scores are exact and only its recall is approximate. The recall
of an IVF index is set by ``nprobe``, and a good ``nprobe`` depends on how noisy the two
graphs are; :func:`tune_nprobe` raises it until a sample of the real queries finds its exact
best match often enough.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import faiss
import numpy as np
import torch
import torch.nn.functional as F

from .config import INDEX_KINDS
from .stopwatch import Progress

log = logging.getLogger(__name__)

IVF_KINDS = ("ivf", "ivfpq")
REFINE_FACTOR = 8  # ivfpq re-ranks the REFINE_FACTOR * k best codes exactly
TRAIN_PER_LIST = {"ivf": 256, "ivfpq": 64}  # k-means training points per IVF list


@contextmanager
def batch_independent() -> Iterator[None]:
    """Within the block, exact inner products go through BLAS for any number of queries:
    FAISS's default switches to another summation order below 20 queries, and a score must
    not depend on the batch it came in. The previous setting is restored on the way out."""
    before = faiss.cvar.distance_compute_blas_threshold
    faiss.cvar.distance_compute_blas_threshold = 1
    try:
        yield
    finally:
        faiss.cvar.distance_compute_blas_threshold = before


@dataclass(frozen=True)
class Candidates:
    """Sparse top-k candidate lists.

    Attributes:
        scores: ``[n, k]`` float32, each row in descending order.
        index: ``[n, k]`` int64 target node numbers; ``-1`` pads rows with fewer than ``k``
            candidates (their score is ``-inf``).
    """

    scores: torch.Tensor
    index: torch.Tensor

    def __post_init__(self) -> None:
        if self.scores.shape != self.index.shape or self.scores.dim() != 2:
            raise ValueError(f"scores {tuple(self.scores.shape)} and index "
                             f"{tuple(self.index.shape)} must be equal [n, k] shapes")

    @property
    def k(self) -> int:
        return self.index.size(1)

    def take_rows(self, rows: torch.Tensor) -> "Candidates":
        return Candidates(self.scores[rows], self.index[rows])

    def scatter_rows(self, rows: torch.Tensor, num_rows: int) -> "Candidates":
        """A ``num_rows``-row copy holding these lists at ``rows``, empty lists elsewhere."""
        scores = torch.full((num_rows, self.k), -torch.inf)
        index = torch.full((num_rows, self.k), -1, dtype=torch.long)
        scores[rows], index[rows] = self.scores, self.index
        return Candidates(scores, index)

    @staticmethod
    def sorted(scores: torch.Tensor, index: torch.Tensor) -> "Candidates":
        """Candidates with each row ordered by descending score, equal scores by increasing
        target number, padding (``-1``) last.

        This order is canonical: however the targets were split into shards, equal lists
        come out equal, so the tie-breaks of refinement and assignment agree.
        """
        scores = scores.masked_fill(index < 0, -torch.inf)
        by_index = torch.argsort(index.masked_fill(index < 0, torch.iinfo(index.dtype).max),
                                 dim=1, stable=True)
        scores, index = scores.gather(1, by_index), index.gather(1, by_index)
        order = torch.argsort(scores, dim=1, descending=True, stable=True)
        return Candidates(scores.gather(1, order), index.gather(1, order))


def gpu_available() -> bool:
    """True when this FAISS build has GPU support and sees at least one GPU."""
    return hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0


def build_index(x: np.ndarray, kind: str = "flat", *, nlist: int | None = None,
                nprobe: int = 16, hnsw_m: int = 32, ef_search: int = 128,
                seed: int = 0, use_gpu: bool | None = None,
                trained: faiss.Index | None = None) -> faiss.Index:
    """An inner-product FAISS index over the rows of ``x`` (``[n, d]`` float32).

    An IVF index is trained by :func:`trained_index` on :func:`training_rows` of ``x``, or,
    given ``trained``, is a copy of that index (a shard of a base whose sample it was
    trained on: every shard then has the same lists, :func:`trained_index`). ``hnsw`` uses
    ``hnsw_m`` links per node. On a GPU, ``ivfpq`` is built as ``ivf`` (exact codes), since
    FAISS has no GPU fast-scan.
    """
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {INDEX_KINDS}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    gpu = (gpu_available() if use_gpu is None else use_gpu) and kind != "hnsw"
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = ef_search
    else:
        kind = ivf_kind(kind, gpu)
        index = (faiss.clone_index(trained) if trained is not None
                 else trained_on(x, kind, nlist, seed))
        set_nprobe(index, nprobe)  # kept by the GPU copy
    if gpu:
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.add(x)
    return Reranked(index, x) if kind == "ivfpq" else index


def ivf_kind(kind: str, gpu: bool) -> str:
    """The IVF index built for ``kind``: ``ivf`` on a GPU (no GPU fast-scan for ``ivfpq``)."""
    return "ivf" if kind == "ivfpq" and gpu else kind


def _nlist(n: int, kind: str, nlist: int | None) -> int:
    """``nlist`` or the default for ``n`` rows: ``4 sqrt(n)`` for ``ivf``, ``sqrt(n)`` for
    ``ivfpq`` (its lists are scanned fast, so fewer, longer lists cost less in the coarse
    quantiser)."""
    root = 4 * math.sqrt(n) if kind == "ivf" else math.sqrt(n)
    return min(nlist or max(1, int(root)), n)


def training_rows(n: int, kind: str, nlist: int | None, seed: int) -> np.ndarray:
    """The rows (ascending) of an ``n``-row base that an IVF index of ``kind`` trains on: a
    seeded sample of :data:`TRAIN_PER_LIST` per list."""
    size = min(n, TRAIN_PER_LIST[kind] * _nlist(n, kind, nlist))
    return np.sort(np.random.default_rng(seed).choice(n, size=size, replace=False))


def trained_on(x: np.ndarray, kind: str, nlist: int | None, seed: int) -> faiss.Index:
    """:func:`trained_index` for the rows of ``x``, on their :func:`training_rows`."""
    n = x.shape[0]
    return trained_index(x[training_rows(n, kind, nlist, seed)], n, kind, nlist)


def trained_index(sample: np.ndarray, n: int, kind: str, nlist: int | None) -> faiss.Index:
    """An empty IVF index (CPU) for a base of ``n`` rows, trained on ``sample`` (its
    :func:`training_rows`): the coarse quantiser's centroids, and for ``ivfpq`` the codes.

    The shards of a sharded search each add their rows to a copy (``build_index(trained=)``),
    so a query probes the same lists in every shard as in one index over the whole base:
    the shards scan between them what one index scans, and find what it finds (for
    ``ivfpq``, at least what it finds: each shard re-ranks its own best codes). Shards
    trained apart probed lists of their own, P times as many between them, and tuned
    another ``nprobe``: the 1M pair's search took 312 / 423 s at P = 2 / 4, now 209 / 331 s
    (147 s at P = 1; a fast-scan list costs partly per probe, however short), with the same
    Hits@1 at every P."""
    d = sample.shape[1]
    nlist = _nlist(n, kind, nlist)
    if kind == "ivf":
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
    else:
        index = faiss.index_factory(d, f"IVF{nlist},PQ{pq_codes(d)}x4fs",
                                    faiss.METRIC_INNER_PRODUCT)
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return index


def pq_codes(d: int) -> int:
    """Sub-quantisers of an ``ivfpq`` index over width ``d``: the fewest dividing ``d`` that
    leave at most 8 dimensions to each 4-bit code, and at least 16 codes (64 bits) per row.

    At 384 dimensions (L = 2 over 128-wide features) that is 48; 32 codes lost no recall@1
    there, but coarser codes lose recall@10, and on narrow data 64 bits are the floor.
    """
    return next(m for m in range(1, d + 1) if d % m == 0 and m >= min(d, max(16, d / 8)))


def probe_rows(n: int, seed: int = 0, size: int = 1000) -> np.ndarray:
    """The seeded sample of ``size`` of ``n`` query rows whose recall tunes ``nprobe``."""
    return np.sort(np.random.default_rng(seed).choice(n, size=min(size, n), replace=False))


def exact_best(base: np.ndarray, probes: np.ndarray) -> np.ndarray:
    """``[m]`` the exact best inner product of each probe over ``base`` (brute force)."""
    with batch_independent():
        scores, _ = faiss.knn(np.ascontiguousarray(probes, dtype=np.float32),
                              np.ascontiguousarray(base, dtype=np.float32), 1,
                              metric=faiss.METRIC_INNER_PRODUCT)
    return scores[:, 0]


class Reranked:
    """An ``ivfpq`` index: the ``REFINE_FACTOR * k`` best rows of an IVF fast-scan index
    ``codes`` for a query, re-ranked by their exact inner products with the rows of ``x``
    (``[n, d]`` float32, contiguous), the rows ``codes`` holds the codes of.

    What FAISS's ``IndexRefineFlat`` does, without its copy of the rows: the rows are the
    embedding itself, which the caller holds anyway (on Ray, the object store's pages). The
    copy was 1.15 GB in each part actor of the 3M pair at P = 4, where the store held the
    same rows, and the machine ran out of memory; 1.5 GB of the 1M pair in one process.
    """

    def __init__(self, codes: faiss.Index, x: np.ndarray) -> None:
        if x.dtype != np.float32 or not x.flags.c_contiguous or x.shape != (codes.ntotal,
                                                                          codes.d):
            raise ValueError(f"x must be the index's {codes.ntotal} x {codes.d} rows as "
                             f"contiguous float32, got {x.dtype} {x.shape}")
        self.codes, self.x = codes, x

    @property
    def ntotal(self) -> int:
        return self.codes.ntotal

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``([m, k] scores, [m, k] rows)`` of ``queries`` (``[m, d]`` float32, contiguous),
        best first; rows ``-1`` with score ``-inf`` where fewer than ``k`` were found."""
        _, rows = self.codes.search(queries, k * REFINE_FACTOR)
        exact = np.empty(rows.shape, dtype=np.float32)
        faiss.fvec_inner_products_by_idx(  # -inf where a row is -1
            faiss.swig_ptr(exact), faiss.swig_ptr(queries), faiss.swig_ptr(self.x),
            faiss.swig_ptr(rows), self.x.shape[1], rows.shape[0], rows.shape[1])
        best = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        return np.take_along_axis(exact, best, 1), np.take_along_axis(rows, best, 1)


def set_nprobe(index: faiss.Index | Reranked, nprobe: int) -> int:
    """Probe ``nprobe`` lists (at most all) of an IVF index; returns its number of lists."""
    index = index.codes if isinstance(index, Reranked) else index
    ivf = faiss.try_extract_index_ivf(index) or index  # a GPU IVF index is its own
    ivf.nprobe = min(nprobe, ivf.nlist)
    return ivf.nlist


def probe(index: faiss.Index | Reranked, probes: np.ndarray, k: int, nprobe: int
          ) -> tuple[np.ndarray, int]:
    """The best score an IVF index finds for each probe with ``nprobe`` lists and search width
    ``k`` (as the real search runs), and the index's number of lists."""
    nlist = set_nprobe(index, nprobe)
    with batch_independent():
        scores, _ = index.search(np.ascontiguousarray(probes, dtype=np.float32), k)
    return scores[:, 0], nlist


Measure = Callable[[int], tuple[np.ndarray, np.ndarray, int]]
STEP = 2 ** 0.5  # nprobe grows by this factor: search time is linear in nprobe, so a finer
# step overshoots the needed recall by less (doubling probed 128 lists where 91 might do)


def tune_nprobe(measure: Measure, nprobe: int, target: float) -> dict:
    """Raise ``nprobe`` by steps of :data:`STEP` until the search finds the exact best match
    of at least ``target`` of the sample queries; returns what was measured.

    ``measure(nprobe)`` gives, per sample query, the best score found and the exact best
    score, and the number of lists (it runs :func:`probe` on one index, or on every shard
    and takes the maximum). A query counts as found when its score reaches the exact one,
    so exact ties are not misses.
    """
    while True:
        found, exact, nlist = measure(nprobe)
        recall = float(np.mean(found >= exact - 1e-5 * np.abs(exact))) if exact.size else 1.0
        log.info("search: nprobe %d of %d lists finds the exact best match for %.2f %% of "
                 "%d sampled queries", nprobe, nlist, 100 * recall, exact.size)
        if recall >= target or nprobe >= nlist:
            return {"nprobe": min(nprobe, nlist), "nlist": nlist, "recall@1": recall,
                    "sample": int(exact.size)}
        nprobe = min(max(nprobe + 1, round(nprobe * STEP)), nlist)


TIE_WIDTH = 8  # a tie at the k-th score is widened up to this many times k, no further
FLAT_ROUNDING = 1e-6  # bound on |BLAS score - pair score| / (|query| |row|), ~50x measured


def row_norms(x: np.ndarray) -> np.ndarray:
    """Each row's Euclidean norm (float32 in, float32 out), for the error bounds of the
    exact searches: torch's kernel, where numpy's took 0.1 s of each of DBP15k's two-way
    searches (15,338 x 1,280: 26 ms against 2-3 ms)."""
    return torch.linalg.vector_norm(torch.from_numpy(x), dim=1).numpy()


def pair_scores(index: faiss.IndexFlat, queries: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """``[n, w]`` the inner product of each query with the index rows ``labels`` (``-1``:
    ``-inf``), each pair computed on its own.

    FAISS scores a flat index through BLAS, whose rounding depends on the shape of the
    product: the same pair can differ in its last bits between a shard and the whole index,
    and break a tie the other way. A pair's own inner product depends on the pair alone.
    """
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    labels = np.ascontiguousarray(labels, dtype=np.int64)
    out = np.empty(labels.shape, dtype=np.float32)
    index.compute_distance_subset(labels.shape[0], faiss.swig_ptr(queries), labels.shape[1],
                                  faiss.swig_ptr(out), faiss.swig_ptr(labels))
    out[labels < 0] = -np.inf
    return out


def taken(x: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``x[rows]``, without a copy when ``rows`` are every row in order: an embedding
    searched whole is the array itself (a 1M-node graph's is 1.5 GB: in one process that
    copy was a third of the search stage's growth of the peak; on Ray the array is the
    object store's)."""
    return x if rows.size == x.shape[0] and np.array_equal(rows, np.arange(rows.size)) else x[rows]


def widest(k: int, total: int) -> int:
    """The width at which :func:`search`'s widening of a tie at the ``k``-th score over
    ``total`` rows ends, whatever the tie."""
    width = min(k + 1, total)
    while not (width <= k or width == total or width > TIE_WIDTH * k):
        width = min(2 * width, total)
    return width


def distinct_rows(*parts: np.ndarray, block: int = 1 << 16) -> tuple[np.ndarray, np.ndarray]:
    """Which rows of the ``[n, *]`` arrays ``parts`` (read side by side; items of 4 or 8
    bytes, compared bit for bit) are equal: ``(first, inverse)``, row ``i`` equal to row
    ``first[inverse[i]]``, the first of its kind.

    The rows are hashed (``block`` rows at a time), then each is checked against the first
    of its hash; a collision leaves the later row on its own. 1M x 11 rows: 0.3 s, where
    ``np.unique(..., axis=0)`` took 3.0 s."""
    n = parts[0].shape[0]
    bits = [np.ascontiguousarray(p).view(np.uint32 if p.dtype.itemsize == 4 else np.uint64)
            for p in parts]
    mix = np.random.default_rng(0)
    weights = [mix.integers(1, 2**63, b.shape[1], dtype=np.uint64) for b in bits]
    digest = np.zeros(n, dtype=np.uint64)
    for start in range(0, n, block):  # wraps around, as a hash may
        for b, w in zip(bits, weights):
            digest[start:start + block] += b[start:start + block].astype(np.uint64) @ w
    _, first, inverse = np.unique(digest, return_index=True, return_inverse=True)
    lead = first[inverse]
    later = np.flatnonzero(lead != np.arange(n))
    same = np.ones(later.size, dtype=bool)
    for b in bits:
        same &= (b[later] == b[lead[later]]).all(axis=1)
    alone = later[~same]
    inverse[alone] = first.size + np.arange(alone.size)
    return np.append(first, alone), inverse


def search(index: faiss.Index | Reranked, queries: np.ndarray, k: int, *,
           ids: np.ndarray | None = None, block: int = 16384, first_width: int = 0
           ) -> Candidates:
    """Top-``k`` rows of ``index`` for every query row, streamed in blocks of ``block``.

    ``ids`` maps the index's row numbers to target node numbers (used when the index holds
    only a candidate subset of the targets). The lists are canonical (see
    :meth:`Candidates.sorted`), also where the ``k``-th score ties with scores beyond it:
    those rows are searched again, wider, until the whole tie is seen or the search is
    :data:`TIE_WIDTH` times ``k`` wide (past that the cut goes through the tie where FAISS
    put it). A query of zeros ties with every row at 0: its list is the ``k`` lowest target
    numbers, without a search (featureless nodes with no signal, e.g. out of reach of every
    seed, would otherwise widen to the whole index). A CPU ``flat`` index's
    scores are those of :func:`pair_scores`, and a tie there is anything FAISS scored within
    its rounding of the ``k``-th. So the top-k of a sharded flat index, merged, equals the
    top-k of one index, bit for bit. (A GPU flat index keeps FAISS's scores: its shards can
    break near-ties differently.)

    ``first_width``, when above ``k+1``, starts the widening there, for queries already known
    to tie at ``k+1``: a width that holds the whole tie gives the same list, and the doubling
    ends at the same last width.

    Equal queries get equal lists, so each is searched once (:func:`distinct_rows`): the
    featureless flickr_lastfm pair's ties send 11,403 of 12,893 sources to be searched
    again, wider, 1,314 of them distinct, and 13,333 of 15,355 targets, 595 distinct (a
    run: 36 -> 24 s).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    first, inverse = distinct_rows(queries)
    if first.size == queries.shape[0]:
        return _search_distinct(index, queries, k, ids, block, first_width)
    found = _search_distinct(index, queries[first], k, ids, block, first_width)
    return Candidates(found.scores[inverse], found.index[inverse])


def _search_distinct(index: faiss.Index | Reranked, queries: np.ndarray, k: int,
                     ids: np.ndarray | None, block: int, first_width: int) -> Candidates:
    """:func:`search` of distinct ``queries`` (float32, contiguous)."""
    n = queries.shape[0]
    ids = np.arange(index.ntotal, dtype=np.int64) if ids is None else ids
    scores = torch.full((n, k), -torch.inf)
    found = torch.full((n, k), -1, dtype=torch.long)
    flat = isinstance(index, faiss.IndexFlat)
    if flat:
        stored = faiss.rev_swig_ptr(index.get_xb(), index.ntotal * index.d)
        norms = row_norms(stored.reshape(index.ntotal, index.d))
        largest = float(norms.max(initial=0.0))
    meter = Progress("search", n, "queries")
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = np.arange(start, stop)
        blank = ~queries[rows].any(axis=1)
        if blank.any():
            lowest = np.sort(ids)[:k]
            found[rows[blank], :lowest.size] = torch.from_numpy(lowest)
            scores[rows[blank], :lowest.size] = 0.0
            rows = rows[~blank]
        width = min(max(first_width, k + 1), index.ntotal)
        while rows.size:
            q = queries[rows]
            with batch_independent():
                s, i = index.search(q, width)
            c = Candidates.sorted(torch.from_numpy(pair_scores(index, q, i) if flat else s),
                                  torch.from_numpy(np.where(i >= 0, ids[np.maximum(i, 0)], -1)))
            kept = min(k, width)
            scores[rows, :kept], found[rows, :kept] = c.scores[:, :kept], c.index[:, :kept]
            if width <= k or width == index.ntotal or width > TIE_WIDTH * k:
                break
            slack = FLAT_ROUNDING * row_norms(q) * largest if flat else 0.0
            tied = (s[:, -1] >= c.scores[:, k - 1].numpy() - slack) & (i[:, -1] >= 0)
            rows, width = rows[tied], min(2 * width, index.ntotal)
        meter.advance(stop - start)
    return Candidates(scores, found)


def top_k(x_s: np.ndarray, x_t: np.ndarray, k: int, *, candidates: np.ndarray | None = None,
          recall: float = 0.0, **index_options) -> tuple[Candidates, dict]:
    """Top-``k`` targets (rows of ``x_t``) for each source (row of ``x_s``), and the tuning
    report (empty unless tuned).

    ``candidates`` restricts the search to those target node numbers. With ``recall > 0``,
    an IVF index's ``nprobe`` is first tuned (:func:`tune_nprobe`) on a seeded sample of the
    sources.
    """
    ids = None if candidates is None else np.asarray(candidates, dtype=np.int64)
    base = x_t if ids is None else x_t[ids]
    index, tuned = build_index(base, **index_options), {}
    if recall > 0 and index_options.get("kind") in IVF_KINDS:
        probes = x_s[probe_rows(x_s.shape[0], index_options.get("seed", 0))]
        exact = exact_best(base, probes)

        def measure(nprobe: int) -> tuple[np.ndarray, np.ndarray, int]:
            found, nlist = probe(index, probes, k, nprobe)  # leaves the index at nprobe
            return found, exact, nlist

        tuned = tune_nprobe(measure, index_options.get("nprobe", 16), recall)
    return search(index, x_s, k, ids=ids), tuned


BLOCK_CELLS = 1 << 25  # scores held at once by :func:`both_ways`: 128 MiB (2x: 3 % faster)
# :func:`both_ways` saves one of the two products of two flat searches and pays for each
# row's and each column's top-(k+1) of every score (the merges of :class:`ColumnTop`), so it
# wins where d is wide for k. On 2 cores, k = 50, random unit rows (n = m) against two flat
# searches: d = 512, m = 20,000 / 40,000: 6.1 / 20.9 s against 5.9 / 18.9; d = 768, m =
# 10,000: 2.1 against 2.0; d = 1,024, m = 30,000: 17.6 against 22.7; d = 1,536, m = 30,000:
# 22.9 against 29.9; a featureless 45,000-node pair with seeds (d = 2,048): 63.3 against
# 93.5. It pays while d >= BOTH_WAYS_DIM_PER_K (k + 1).
BOTH_WAYS_DIM_PER_K = 20


def both_ways_pays(dim: int, k: int) -> bool:
    """Whether :func:`both_ways` beats two flat searches over rows of width ``dim`` for
    ``k`` candidates (measured: see ``BOTH_WAYS_DIM_PER_K``)."""
    return dim >= BOTH_WAYS_DIM_PER_K * (k + 1)


# Where the CPU multiplies bfloat16 natively (AVX512-BF16, AMX), :func:`both_ways` finds each
# row's and column's candidates from a bfloat16 product and keeps the lists exact: DBP15k
# zh-en's 14,888 x 10,500 x 1,792 product took 1.4 s against 3.5 s in float32. Each list is
# then BF16_WIDTH times k + 1 wide, so that the exact k-th score clears the widest score left
# out by the product's error bound: on that pair +16 cleared it for 86 % of the rows, +32 for
# 99.9 %, +50 for all. The scores' density near the k-th, not k, sets the margin, so a list
# is also at least BF16_MARGIN longer than k + 1: the named pair of 100,000 entities, k = 25
# (a hint pass), 43 wide: 4.7 % of the sampled rows uncertified, 13.6 % with its hints'
# anchors (past BF16_EXTRA in its round, whose product fell back to float32: 160 s against
# 50 s for the first pass); 60 wide: none and 0.1 %; k = 50, 85 wide 2.7 % and 11.5 %,
# 101 wide 0.03 % and 0.9 %.
BF16_WIDTH = 1.65
BF16_MARGIN = 50


def bf16_width(k: int) -> int:
    """How many candidates a row's list holds from a bfloat16 product, for lists of ``k``."""
    return max(math.ceil(BF16_WIDTH * (k + 1)), k + 1 + BF16_MARGIN)
BF16_UNIT = 2.0 ** -9  # bfloat16's unit roundoff (8 significant bits)


def bf16_native() -> bool:
    """Whether this CPU has bfloat16 dot-product instructions (AVX512-BF16 or AMX). Not
    oneDNN's own check, which also says yes on any AVX-512 CPU, where bfloat16 is emulated
    and no faster than float32."""
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported",
                                                          "_is_amx_tile_supported")]
    return any(bool(check()) for check in checks if check is not None)


# The bfloat16 product is used only where it leaves at most BF16_EXTRA of BF16_SAMPLE evenly
# spaced rows to be searched again that the float32 product would not. Searching a list again
# costs about 2.2 / n of the whole float32 search and the bfloat16 product a third of it
# (random unit rows of width 1,536, 15,000 x 15,000, every list searched again: 11.4 s
# against 4.4 s in float32), so it pays up to about 30 % of the lists; the sample reads the
# rows, and the columns were searched again 2.3 times as often (DBP15k zh-en's rows of names
# with 32 hinted anchors: 7.4 % of the sample; 3.97 s against 5.9 s in float32, the same
# lists). Rows tied at the k-th are searched again either way (the featureless
# flickr_myspace: 20.1 s with bfloat16, 24.3 s in float32).
BF16_SAMPLE = 256
BF16_EXTRA = 0.15


def bf16_certifies(q_s: np.ndarray, q_t: np.ndarray, k: int,
                   low_t: torch.Tensor | None = None) -> bool:
    """Whether a bfloat16 product of ``q_s`` with ``q_t`` certifies the top-``k`` lists
    (:func:`both_ways`) of a sample of the nonzero rows of ``q_s`` (float32, contiguous)
    about as well as float32 does: it leaves at most :data:`BF16_EXTRA` of them more to
    search again. ``low_t``: ``q_t`` in bfloat16, transposed, where the caller has it."""
    n, m = q_s.shape[0], q_t.shape[0]
    wide = min(bf16_width(k), m)
    sample = q_s[np.unique(np.linspace(0, n - 1, min(n, BF16_SAMPLE)).astype(np.int64))]
    norms = row_norms(sample)
    sample, norms = sample[norms > 0], norms[norms > 0]
    if wide <= k or not norms.size:  # every target is on every list, or nothing to rank
        return True
    exact = torch.from_numpy(sample @ q_t.T).topk(k + 1, dim=1).values.double()
    if low_t is None:
        low_t = torch.from_numpy(q_t).bfloat16().T
    low = torch.from_numpy(sample).bfloat16() @ low_t
    widest = low.float().topk(wide, dim=1).values[:, -1].double()
    scale = torch.from_numpy(norms * float(row_norms(q_t).max()))
    kth = exact[:, k - 1]
    single = exact[:, k] < kth - 2 * FLAT_ROUNDING * scale
    low_ok = widest + (product_error(q_s.shape[1], True) + FLAT_ROUNDING) * scale < kth
    return float((single & ~low_ok).double().mean()) <= BF16_EXTRA


def product_error(dim: int, bf16: bool, on_cpu: bool = True) -> float:
    """Bound on ``|product score - pair score| / (|query| |row|)`` for rows of width ``dim``:
    float32 BLAS on the CPU (:data:`FLAT_ROUNDING`); float32 on a GPU, whose kernels sum in
    an order of their own (``dim 2^-24``, the worst case of any order, plus the pair
    score's rounding); or bfloat16 inputs rounded (``2u``), an output rounded (``u``),
    accumulated in float32 and the pair score's own rounding."""
    if not bf16:
        return FLAT_ROUNDING if on_cpu else dim * 2.0 ** -24 + FLAT_ROUNDING
    return 3 * BF16_UNIT + BF16_UNIT ** 2 + dim * 2.0 ** -24 + FLAT_ROUNDING


# On a GPU a block holds this share of the memory free at the start, not BLOCK_CELLS: the
# products of a 1M-node pair in 128 MiB blocks are 32 rows each, 31,000 launches of a
# product and two top-k's.
DEVICE_MEMORY_SHARE = 1 / 8


@contextmanager
def ieee_float32() -> Iterator[None]:
    """Within the block, float32 products on a GPU are computed in float32 (not TF32, whose
    10-bit mantissa breaks :func:`product_error`); the previous setting is restored."""
    before = torch.backends.cuda.matmul.fp32_precision
    torch.backends.cuda.matmul.fp32_precision = "ieee"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.fp32_precision = before


def block_rows(m: int, block_cells: int | None, device: torch.device) -> int:
    """Rows of ``[rows, m]`` scores computed at once: ``block_cells`` scores, by default
    :data:`BLOCK_CELLS` on the CPU and :data:`DEVICE_MEMORY_SHARE` of a GPU's free memory
    (float32, with room for its top-k's)."""
    if block_cells is None:
        block_cells = BLOCK_CELLS if device.type == "cpu" else int(
            DEVICE_MEMORY_SHARE * torch.cuda.mem_get_info(device)[0] / 4)
    return max(1, block_cells // max(1, m))


def on_device(kind: str, device: str | torch.device) -> bool:
    """Whether a ``kind`` search on ``device`` is :func:`both_ways`'s products there: a flat
    (exact) search on a GPU that FAISS cannot use (faiss-cpu)."""
    return kind == "flat" and torch.device(device).type != "cpu" and not gpu_available()


def both_ways(x_s: np.ndarray, x_t: np.ndarray, k: int, *, ids_s: np.ndarray | None,
              ids_t: np.ndarray, block_cells: int | None = None, bf16: bool | None = None,
              device: str | torch.device = "cpu") -> tuple[Candidates, Candidates | None]:
    """Exact top-``k`` both ways from one product: the best rows of ``x_t`` (node numbers
    ``ids_t``) for each row of ``x_s``, and the best rows of ``x_s`` (``ids_s``) for each row
    of ``x_t``; with ``ids_s=None`` the first only (the exact search on a GPU without
    faiss-gpu).

    The forward and the backward search of a refined or mutual run score the same pairs:
    each block of :math:`X_s X_t^T` (``block_cells`` scores, :func:`block_rows`) gives its
    rows' best ``w`` and updates every column's running best ``w``, so the product is
    computed once, not twice (DBP15k zh_en, 14,888 x 10,500 x 1,536 on 2 cores: 5.2 s
    against 6.9 s for two flat FAISS searches). The blocks are multiplied and ranked on
    ``device`` (a torch device; the lists are finished on the CPU). ``w`` is ``k + 1``, or
    :func:`bf16_width` with a ``bf16`` product (default: on a CPU where :func:`bf16_native`
    and :func:`bf16_certifies`) or on a GPU: a GPU's float32
    error bound is wider than BLAS's, and with ``k + 1`` a 100,000-node pair's rows came
    so often within it of their ``k``-th that the CPU searched them again (7.4 s a pass on an
    H100, whose float32 rate does the product's arithmetic in about a tenth of a second).
    The lists are then those of :func:`search` on a flat index, bit for bit, on any device:
    every candidate that can reach the ``k``-th is rescored by :func:`pair_scores`
    (:func:`_canonical`), and a row whose widest product score is within the product's
    error (:func:`product_error`) of its exact ``k``-th, or whose query is zero, is searched
    again by :func:`search`.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    device = torch.device(device)
    on_cpu = device.type == "cpu"
    # The float32 product on the CPU through numpy's BLAS (OpenBLAS), not torch's (MKL): on
    # this AMD EPYC machine 14,888 x 10,500 x 1,792 took 2.3 s against 4.3 s, and 45,000^2 x
    # 2,048 40 s against 70 s (190 against 100 GF/s; not measured on an Intel CPU).
    q_s, q_t = (np.ascontiguousarray(x, dtype=np.float32) for x in (x_s, x_t))
    native = on_cpu and bf16_native() if bf16 is None else bf16
    low_t = torch.from_numpy(q_t).bfloat16().T if native else None  # the check's too
    if bf16 is None:
        bf16 = native and bf16_certifies(q_s, q_t, k, low_t)
    base = None if on_cpu and not bf16 else (low_t if bf16 else torch.from_numpy(q_t).T
                                             ).to(device)
    n, m = q_s.shape[0], q_t.shape[0]
    wide = bf16_width(k) if bf16 or not on_cpu else k + 1
    w_row, w_col = min(wide, m), min(wide, n)
    row_s, row_i = torch.empty(n, w_row), torch.empty(n, w_row, dtype=torch.long)
    columns = None if ids_s is None else ColumnTop(m, w_col, device)
    block = block_rows(m, block_cells, device)
    meter = Progress("search both ways" if columns else "search", n, "queries")
    with ieee_float32():
        for start in range(0, n, block):
            rows = q_s[start:start + block]
            # a bfloat16 block stays so: its tops are taken as fast and widened exactly
            # after (DBP15k zh-en: 0.16 s a pass converting every block first)
            s = torch.from_numpy(rows @ q_t.T) if base is None else \
                torch.from_numpy(rows).to(device).to(base.dtype) @ base
            top = s.topk(w_row, dim=1)
            row_s[start:start + block], row_i[start:start + block] = top.values.cpu(), \
                top.indices.cpu()
            if columns is not None:
                columns.add(s, start)
            meter.advance(s.size(0))
    error = product_error(q_s.shape[1], bf16, on_cpu)
    forward = _canonical(x_s, x_t, ids_t, row_s, row_i, k, error)
    if columns is None:
        return forward, None
    col_s, col_i = (t.cpu() for t in columns.result())
    return forward, _canonical(x_t, x_s, ids_s, col_s.T.contiguous(), col_i.T.contiguous(),
                               k, error)


class ColumnTop:
    """Every column's best ``width`` scores (and their row numbers) over the row blocks of a
    ``[n, m]`` product, fed block by block (:meth:`add`), read by :meth:`result`.

    A block only contributes its scores above a column's current ``width``-th, a small
    share, and those are buffered and merged by one sort once the buffer holds as many
    entries as the tops: the thresholds lag a little (more entries are buffered), but the
    sort of all ``m x width`` tops is paid a few times, not once per block. On a
    44,634-target product (k = 50, 60 blocks) the whole two-way search took 84 s merging
    every block and 63 s buffered; merging per block had replaced a ``topk`` down the
    columns of every block (1.2 s of the 5 on DBP15k, then 0.2 s). Equal scores keep the
    earlier row first, as a merge per block does."""

    def __init__(self, m: int, width: int, device: torch.device = torch.device("cpu")) -> None:
        self.m, self.width, self.device = m, width, device
        self.top_s = torch.empty(0, m, device=device)
        self.top_i = torch.empty(0, m, dtype=torch.long, device=device)
        self.pending: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self.buffered = 0

    def add(self, s: torch.Tensor, start: int) -> None:
        """Take the block ``s`` ``[b, m]`` of rows ``start ..`` (float32 or bfloat16; the
        tops are kept in float32, which holds every bfloat16 exactly)."""
        if self.top_s.size(0) < self.width:  # the first blocks: fewer rows than the width
            s_top, i_top = s.topk(min(self.width, s.size(0)), dim=0)
            self.top_s = torch.cat([self.top_s, s_top.float()])
            self.top_i = torch.cat([self.top_i, i_top + start])
            if self.top_s.size(0) > self.width:
                self.top_s, pick = self.top_s.topk(self.width, dim=0)
                self.top_i = self.top_i.gather(0, pick)
            return
        rows, cols = (s > _rounded_down(self.top_s[-1], s.dtype)).nonzero(as_tuple=True)
        if rows.numel():
            self.pending.append((s[rows, cols].float(), rows + start, cols))
            self.buffered += rows.numel()
            if self.buffered >= self.top_s.numel():
                self._merge()

    def result(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``[width, m]`` scores and row numbers, each column in descending order."""
        self._merge()
        return self.top_s, self.top_i

    def _merge(self) -> None:
        if not self.pending:
            return
        m, width = self.m, self.top_s.size(0)
        vals = torch.cat([self.top_s.flatten(), *(v for v, _, _ in self.pending)])
        owners = torch.cat([self.top_i.flatten(), *(r for _, r, _ in self.pending)])
        where = torch.cat([torch.arange(m, device=self.device).repeat(width),
                           *(c for _, _, c in self.pending)])
        self.pending, self.buffered = [], 0
        order = torch.sort(_by_group_then_descending(where, vals), stable=True).indices
        first = torch.zeros(m + 1, dtype=torch.long, device=self.device)
        first[1:] = torch.cumsum(torch.bincount(where, minlength=m), 0)
        rank = torch.arange(order.numel(), device=self.device) - first[where[order]]
        keep = order[rank < width]
        self.top_s = vals[keep].view(m, width).T.contiguous()
        self.top_i = owners[keep].view(m, width).T.contiguous()


def _rounded_down(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` (float32) in ``dtype``, each value the largest there not above it: a block of
    that type is compared with its column thresholds without being widened to float32
    (DBP15k zh-en's bfloat16 blocks: 67 -> 24 ms each). What is above ``x`` is above it,
    and the few entries between are dropped by the merge, which keeps the earlier row of
    equal scores."""
    if x.dtype == dtype:
        return x
    low = x.to(dtype)
    return torch.where(low.float() > x, torch.nextafter(low, torch.full_like(low, -torch.inf)),
                       low)


def _by_group_then_descending(groups: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """One int64 key per entry that orders by ``groups`` (``>= 0``) ascending, then by the
    float32 ``values`` descending (-0.0 as 0.0): one sort, where two stable ones (by value,
    then by group) took 0.25 s of a column merge of DBP15k's two-way search."""
    bits = (values + 0.0).view(torch.int32).to(torch.int64)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # the floats' order, as integers
    return groups * (1 << 32) + (0x7FFFFFFF - ordered)


def _canonical(queries: np.ndarray, base: np.ndarray, ids: np.ndarray, raw: torch.Tensor,
               found: torch.Tensor, k: int, error: float = FLAT_ROUNDING) -> Candidates:
    """The lists of :func:`search` on a flat index over ``base`` from each query's best
    ``w > k`` rows by a product (``raw`` scores, descending, ``found`` row numbers of
    ``base``) whose scores are within ``error`` (relative, :func:`product_error`) of the
    pair scores.

    The first ``k + 1`` are rescored; of the rest only those whose product score, plus the
    error, reaches the ``k``-th of those: no other can enter the list (on DBP15k zh-en's
    bfloat16 product, 84 wide, that rescored 0.66 s -> 0.4 s)."""
    index = faiss.IndexFlatIP(base.shape[1])
    index.add(np.ascontiguousarray(base, dtype=np.float32))
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    largest = float(row_norms(base).max(initial=0.0))
    slack = (error + FLAT_ROUNDING) * row_norms(queries) * largest
    labels, first = found.numpy(), min(k + 1, found.size(1))
    scores = pair_scores(index, queries, labels[:, :first])
    if labels.shape[1] > first:
        kth = np.partition(scores, first - k, axis=1)[:, first - k]
        labels = labels.copy()
        rest = labels[:, first:]
        rest[raw[:, first:].numpy() < (kth - slack)[:, None]] = -1
        scores = np.concatenate([scores, pair_scores(index, queries, rest)], axis=1)
    c = Candidates.sorted(torch.from_numpy(scores),
                          torch.from_numpy(np.where(labels >= 0, ids[np.maximum(labels, 0)], -1)))
    pad = k - min(k, c.k)
    out = Candidates(F.pad(c.scores[:, :k], (0, pad), value=-torch.inf),
                     F.pad(c.index[:, :k], (0, pad), value=-1))
    if found.size(1) <= k:  # no more than k rows in the base: every one was scored
        return out
    again = np.flatnonzero((raw[:, -1].numpy() >= c.scores[:, k - 1].numpy() - slack)
                           | ~queries.any(axis=1))
    if again.size:  # tied already: searched at once as wide as the widening would end
        # (flickr_lastfm: 102, 204 then 408 wide took 20.0 s with the rescoring, so 18.7 s)
        log.info("search: %d of %d lists searched again (tied within the product's error)",
                 again.size, queries.shape[0])
        redo = search(index, queries[again], k, ids=ids, first_width=widest(k, index.ntotal))
        out.scores[again], out.index[again] = redo.scores, redo.index
    return out


def candidates_from_coo(rows: torch.Tensor, cols: torch.Tensor, values: torch.Tensor,
                        num_rows: int, k: int) -> Candidates:
    """The ``k`` best entries of each row of a sparse matrix given as COO triplets.

    Duplicate ``(row, col)`` entries are summed; rows with fewer than ``k`` entries are
    padded with ``-1`` / ``-inf``.
    """
    width = int(cols.max()) + 1 if cols.numel() else 1
    key, inverse = torch.unique(rows * width + cols, return_inverse=True)
    summed = torch.zeros(key.numel(), dtype=values.dtype).index_add_(0, inverse, values)
    rows, cols = key // width, key % width
    # by row, then score descending, then column: one stable sort (np.lexsort took 0.55 s
    # of a 0.65 s merge of DBP15k's two-way lists)
    order = torch.sort(_by_group_then_descending(rows, summed.float()), stable=True).indices
    rows, cols, summed = rows[order], cols[order], summed[order]
    start = torch.zeros(num_rows + 1, dtype=torch.long)
    start[1:] = torch.cumsum(torch.bincount(rows, minlength=num_rows), 0)
    rank = torch.arange(rows.numel()) - start[rows]
    keep = rank < k
    scores = torch.full((num_rows, k), -torch.inf)
    index = torch.full((num_rows, k), -1, dtype=torch.long)
    scores[rows[keep], rank[keep]] = summed[keep]
    index[rows[keep], rank[keep]] = cols[keep]
    return Candidates(scores, index)
