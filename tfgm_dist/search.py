"""Stage 4, search: top-k targets per source by inner product, with FAISS.

The embeddings are concatenations of L2-normalised per-layer blocks, so one inner product
is the sum of the per-layer cosines (principle P1). FAISS does every nearest-neighbour
search of the project: exact (``flat``) by default, ``ivf`` or ``hnsw`` for scale, on a GPU
when faiss-gpu sees one. Sources are streamed through the index in blocks, so memory is
bounded by ``block x k`` results, never by a dense ``|Vs| x |Vt|`` matrix.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import faiss
import numpy as np
import torch

log = logging.getLogger(__name__)

# Inner products through BLAS for any number of queries: FAISS's default switches to another
# summation order below 20 queries, and a score must not depend on the batch it came in.
faiss.cvar.distance_compute_blas_threshold = 1

INDEX_KINDS = ("flat", "ivf", "hnsw")


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
                seed: int = 0, use_gpu: bool | None = None) -> faiss.Index:
    """An inner-product FAISS index over the rows of ``x`` (``[n, d]`` float32).

    ``ivf`` trains its coarse quantiser on at most 256 points per list (seeded), with
    ``nlist`` defaulting to ``4 sqrt(n)``; ``hnsw`` uses ``hnsw_m`` links per node.
    """
    if kind not in INDEX_KINDS:
        raise ValueError(f"unknown index kind {kind!r}; choose one of {INDEX_KINDS}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    n, d = x.shape
    if kind == "flat":
        index = faiss.IndexFlatIP(d)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(d, hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efSearch = ef_search
    else:
        nlist = min(nlist or max(1, int(4 * math.sqrt(n))), n)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        sample = np.random.default_rng(seed).choice(n, size=min(n, 256 * nlist), replace=False)
        index.train(x[np.sort(sample)])
        index.nprobe = min(nprobe, nlist)
    if (gpu_available() if use_gpu is None else use_gpu) and kind != "hnsw":
        index = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, index)
    index.add(x)
    return index


def search(index: faiss.Index, queries: np.ndarray, k: int, *,
           ids: np.ndarray | None = None, block: int = 16384) -> Candidates:
    """Top-``k`` rows of ``index`` for every query row, streamed in blocks of ``block``.

    ``ids`` maps the index's row numbers to target node numbers (used when the index holds
    only a candidate subset of the targets). The lists are canonical (see
    :meth:`Candidates.sorted`), also where the ``k``-th score ties with scores beyond it:
    those rows are searched again, wider, until the whole tie is seen. So the top-k of a
    sharded index, merged, equals the top-k of one index (for exact ``flat`` indexes).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    n = queries.shape[0]
    ids = np.arange(index.ntotal, dtype=np.int64) if ids is None else ids
    scores = torch.full((n, k), -torch.inf)
    found = torch.full((n, k), -1, dtype=torch.long)
    for start in range(0, n, block):
        stop = min(start + block, n)
        rows = np.arange(start, stop)
        width = min(k + 1, index.ntotal)
        while rows.size:
            s, i = index.search(queries[rows], width)
            c = Candidates.sorted(torch.from_numpy(s),
                                  torch.from_numpy(np.where(i >= 0, ids[np.maximum(i, 0)], -1)))
            kept = min(k, width)
            scores[rows, :kept], found[rows, :kept] = c.scores[:, :kept], c.index[:, :kept]
            if width <= k or width == index.ntotal:
                break
            tied = (s[:, k - 1] == s[:, -1]) & (i[:, -1] >= 0)
            rows, width = rows[tied], min(2 * width, index.ntotal)
        log.info("search: %d/%d queries", stop, n)
    return Candidates(scores, found)


def top_k(x_s: np.ndarray, x_t: np.ndarray, k: int, *, candidates: np.ndarray | None = None,
          kind: str = "flat", **index_options) -> Candidates:
    """Top-``k`` targets (rows of ``x_t``) for each source (row of ``x_s``).

    ``candidates`` restricts the search to those target node numbers.
    """
    if candidates is not None:
        return search(build_index(x_t[candidates], kind, **index_options), x_s, k,
                      ids=np.asarray(candidates, dtype=np.int64))
    return search(build_index(x_t, kind, **index_options), x_s, k)


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
    order = torch.from_numpy(np.lexsort((-summed.numpy(), rows.numpy())))
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
