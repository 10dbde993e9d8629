"""Split a graph's nodes into P parts for the distributed embed stage.

A part's actor needs the previous layer's rows of its 1-hop halo, so a partition that cuts
few edges moves little data. METIS (through ``pymetis``, when installed) minimises the cut;
without it, the reverse Cuthill-McKee order of scipy cut into P equal contiguous runs keeps
neighbours together. The choice does not change any result, only the traffic; it is recorded
in the run's metrics.
"""
from __future__ import annotations

import io
import logging
import subprocess
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

from .errors import InputError

if TYPE_CHECKING:  # not imported at run time: METIS runs in a child that needs no torch
    import torch

log = logging.getLogger(__name__)

try:
    import pymetis
except ImportError:  # optional: the fallback gives the same results with more traffic
    pymetis = None


@dataclass(frozen=True)
class Partition:
    """``part[i]`` is the part of node ``i``; ``position[i]`` its row within that part."""

    part: np.ndarray  # [N] int64
    position: np.ndarray  # [N] int64
    num_parts: int
    method: str  # "metis", "rcm" or "single"

    def nodes(self, p: int) -> np.ndarray:
        """The node numbers of part ``p``, increasing (row ``position[i]`` is node ``i``)."""
        return np.flatnonzero(self.part == p)

    def cut_edges(self, edge_index: torch.Tensor) -> int:
        """How many edges join two different parts."""
        return int((self.part[edge_index[0].numpy()] != self.part[edge_index[1].numpy()]).sum())


def partition(edge_index: torch.Tensor, num_nodes: int, parts: int, *, seed: int = 0,
              method: str = "auto") -> Partition:
    """Partition ``num_nodes`` nodes into ``parts`` non-empty parts.

    ``method``: ``metis``, ``rcm`` or ``auto`` (METIS when ``pymetis`` is installed).
    """
    if parts < 1:
        raise InputError(f"partitions = {parts} is out of range (must be >= 1)")
    if parts > num_nodes:
        raise InputError(f"partitions = {parts} exceeds the graph's {num_nodes} nodes")
    if method == "auto":
        method = "metis" if pymetis is not None else "rcm"
    if parts == 1:
        part, method = np.zeros(num_nodes, dtype=np.int64), "single"
    elif method == "metis":
        if pymetis is None:
            raise ValueError("partition method 'metis' needs pymetis: pip install "
                             "'tfgm-dist[metis]'")
        part = _metis(_symmetric(edge_index, num_nodes), parts, seed)
    elif method == "rcm":
        order = reverse_cuthill_mckee(_symmetric(edge_index, num_nodes), symmetric_mode=True)
        part = np.empty(num_nodes, dtype=np.int64)
        part[order] = np.arange(num_nodes) * parts // num_nodes
    else:
        raise ValueError(f"unknown partition method {method!r}; choose metis, rcm or auto")
    sizes = np.bincount(part, minlength=parts)
    if (sizes == 0).any():  # METIS may leave a part empty on tiny or disconnected graphs
        order = np.argsort(part, kind="stable")
        part = np.empty(num_nodes, dtype=np.int64)
        part[order] = np.arange(num_nodes) * parts // num_nodes
        sizes = np.bincount(part, minlength=parts)
    position = np.empty(num_nodes, dtype=np.int64)
    for p in range(parts):
        position[part == p] = np.arange(sizes[p])
    log.info("partition: %d nodes into %d parts by %s, sizes %d..%d", num_nodes, parts,
             method, sizes.min(), sizes.max())
    return Partition(part, position, parts, method)


def _symmetric(edge_index: torch.Tensor, n: int) -> sp.csr_matrix:
    """The undirected adjacency pattern without self-loops, as scipy CSR."""
    src, dst = edge_index.numpy()
    keep = src != dst
    a = sp.coo_matrix((np.ones(int(keep.sum()), dtype=np.int8), (src[keep], dst[keep])),
                      shape=(n, n)).tocsr()
    a = (a + a.T).tocsr()
    a.sum_duplicates()
    return a


def _metis(adj: sp.csr_matrix, parts: int, seed: int) -> np.ndarray:
    """METIS's parts of ``adj``, computed in a child process of its own.

    METIS draws from the C library's ``rand()``, whose state the whole process shares: in a
    Ray driver, whose runtime threads run beside it, the same 300,000-node graph and seed
    gave another partition in 1 of 3 runs, as did two runs of the 1M-node pair (so other
    FAISS shards, another tuned ``nprobe``, other IVF results). A fresh interpreter has no
    other thread to draw from it; starting it costs about 0.75 s. (Not ``multiprocessing``: its
    ``spawn`` imports the caller's main script again, which fails in a script without a
    ``__main__`` guard.)"""
    sent = io.BytesIO()
    np.savez(sent, indptr=adj.indptr, indices=adj.indices, parts=parts, seed=seed)
    child = subprocess.run([sys.executable, "-c", "from tfgm_dist.partition import _metis_child; "
                            "_metis_child()"], input=sent.getvalue(), capture_output=True)
    if child.returncode:
        raise RuntimeError("METIS failed in its child process: "
                           + child.stderr.decode(errors="replace").strip()[-2000:])
    return np.load(io.BytesIO(child.stdout))


def _metis_child() -> None:
    """The child of :func:`_metis`: a graph in on stdin, its parts out on stdout (``.npy``)."""
    got = np.load(io.BytesIO(sys.stdin.buffer.read()))
    _, membership = pymetis.part_graph(
        int(got["parts"]), pymetis.CSRAdjacency(got["indptr"], got["indices"]),
        options=pymetis.Options(seed=int(got["seed"])))
    np.save(sys.stdout.buffer, np.asarray(membership, dtype=np.int64))
