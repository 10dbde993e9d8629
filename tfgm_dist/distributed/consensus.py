"""Refinement sharded like the embedding: one part's side of :func:`tfgm_dist.refine.refine`.

Part ``p`` holds the candidate lists of its source rows (one direction) and the operator rows
of its part of both graphs. A step of the consensus is, in :mod:`tfgm_dist.refine`'s terms,

.. math::
    r_t = S^\\top r_s, \\quad o_s = \\psi_2(r_s, A_s), \\quad o_t = \\psi_2(r_t, A_t), \\quad
    \\hat{S}_{ij} \\leftarrow \\hat{S}_{ij} + \\cos(o_{s,i}, o_{t,j}),

and each factor is split by the parts:

- :math:`r_s`: every part draws the step's indicators and keeps its own rows
  (:func:`~tfgm_dist.refine.indicator_rows`);
- :math:`S^\\top r_s`: a source part sends each target part the softmax values of its
  candidates there and the :math:`r_s` rows of the sources that have some
  (:meth:`Consensus.contributions`); the target part sums them for its rows, entries in
  the order of one process's sparse product (:meth:`Consensus.transposed`), so the sums
  are the same floats;
- :math:`\\psi_2`: the halo exchange of the embedding, layer by layer;
- the cosine: each target part sends each source part the :math:`o_t` rows of the targets
  on its lists (:meth:`Consensus.serve`), and the source part adds the cosines
  (:meth:`Consensus.update`).

A part needs only its rows and its candidates' targets; the result is one process's.
"""
from __future__ import annotations

import numpy as np
import torch

from ..refine import candidate_cosine, candidate_pattern, indicator_rows, initial, settled
from ..search import Candidates, candidates_from_coo
from ..embed import sparse_on_purpose

Pattern = tuple[np.ndarray, np.ndarray]  # (target positions in their part, source numbers)


class Consensus:
    """Part ``p``'s side of one direction of the refinement: the source rows ``nodes`` of its
    part (increasing) with their candidate lists, and the rows of its part of the target
    graph, on which the other parts' contributions are summed.

    Args:
        lists: ``[n_p, k]`` candidate lists of ``nodes`` (empty rows where not searched).
        nodes: the part's source node numbers, increasing.
        home, position: the target graph's partition (part and row of every target);
            ``parts`` parts.
        width: the columns refined, the widest list of any part (:func:`list_width`).
        num_sources: source nodes in all parts (the indicators' rows).
        steps, scale, fixed: as :func:`~tfgm_dist.refine.refine`, ``fixed`` with the part's
            row positions of the pinned sources.
        dim, seed: the indicators' width and seed.
    """

    def __init__(self, lists: Candidates, nodes: np.ndarray, home: np.ndarray,
                 position: np.ndarray, parts: int, width: int, num_sources: int, *, steps: int,
                 scale: float, fixed: tuple[torch.Tensor, torch.Tensor] | None, dim: int,
                 seed: int) -> None:
        self.nodes, self.num_sources, self.dim, self.k = nodes, num_sources, dim, lists.k
        self.index, self.logits = initial(lists, width, steps, scale, fixed)
        self.gen = torch.Generator().manual_seed(seed)
        P = parts
        flat = self.index.flatten().numpy()
        valid = np.flatnonzero(flat >= 0)
        to = home[flat[valid]]
        # entries sent to each target part, row-major, and the rows that have one
        self.sent = [valid[to == q] for q in range(P)]
        self.senders = [np.unique(e // width) for e in self.sent]
        # the targets on this part's lists, per target part: their rows are served here
        wanted = [np.unique(flat[e]) for e in self.sent]
        self.wanted = [position[t] for t in wanted]
        column = np.full(home.size, -1, dtype=np.int64)
        offset = 0
        for t in wanted:
            column[t] = offset + np.arange(t.size)
            offset += t.size
        local = torch.from_numpy(np.where(flat >= 0, column[np.maximum(flat, 0)], -1))
        self.pattern = candidate_pattern(local.view_as(self.index), max(offset, 1))
        self.home, self.position = home, position

    def patterns(self) -> list[Pattern]:
        """Per target part, the entries this part will send it each step: the targets' rows
        there and the sources' numbers."""
        flat = self.index.flatten().numpy()
        width = self.index.size(1)
        return [(self.position[flat[e]], self.nodes[e // width]) for e in self.sent]

    def needs(self) -> list[np.ndarray]:
        """Per target part, the rows of its :math:`o_t` this part's lists name."""
        return self.wanted

    def receive(self, patterns: list[Pattern], needs: list[np.ndarray], rows: int) -> None:
        """As target part of ``rows`` rows: the entries each source part sends
        (``patterns[p]``) become the CSR structure of this part's rows of :math:`S^\\top`,
        columns the sending sources in increasing order, as in one process's product."""
        target = np.concatenate([t for t, _ in patterns])
        source = np.concatenate([s for _, s in patterns])
        self.order = torch.from_numpy(np.lexsort((source, target)))
        # each part's senders are increasing and the parts' sets disjoint: their union
        # sorted is the column order
        senders = np.concatenate([np.unique(s) for _, s in patterns])
        self.stacked = torch.from_numpy(np.argsort(senders, kind="stable"))
        union = senders[self.stacked.numpy()]
        self.col = torch.from_numpy(np.searchsorted(union, source[self.order.numpy()]))
        self.crow = torch.zeros(rows + 1, dtype=torch.long)
        self.crow[1:] = torch.cumsum(torch.bincount(torch.from_numpy(target),
                                                    minlength=rows), 0)
        self.columns = union.size
        self.served = needs

    def draw(self) -> torch.Tensor:
        """This step's indicator rows of the part's sources (raw; :math:`\\psi_2` normalises)."""
        self.r = indicator_rows(self.gen, self.num_sources, self.dim, self.nodes)
        return self.r

    def contributions(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per target part, this step's softmax values of the entries sent there and the
        indicator rows of their sources."""
        s = torch.softmax(self.logits, dim=1).nan_to_num(0.0).flatten().numpy()
        return [(s[e], self.r[torch.from_numpy(rows)].numpy())
                for e, rows in zip(self.sent, self.senders)]

    def transposed(self, *received: tuple[np.ndarray, np.ndarray]) -> torch.Tensor:
        """This part's rows of :math:`r_t = S^\\top r_s` from every source part's
        :meth:`contributions` (in part order)."""
        values = torch.from_numpy(np.concatenate([v for v, _ in received]))[self.order]
        rows = torch.from_numpy(np.concatenate([r for _, r in received]))[self.stacked]
        with sparse_on_purpose():
            s_t = torch.sparse_csr_tensor(self.crow, self.col, values,
                                          (self.crow.numel() - 1, self.columns))
        return s_t @ rows

    def serve(self, o_t: np.ndarray) -> list[np.ndarray]:
        """Per source part, the rows of this part's :math:`o_t` its lists name."""
        return [o_t[rows] for rows in self.served]

    def update(self, o_s: np.ndarray, *served: np.ndarray) -> None:
        """Add this step's cosines at the candidates."""
        o_t = np.concatenate(served)
        if not o_t.shape[0]:  # no candidates: the padding's column 0 must exist
            o_t = np.zeros((1, o_s.shape[1]), dtype=o_s.dtype)
        cos = candidate_cosine(torch.from_numpy(o_s), torch.from_numpy(o_t), self.pattern)
        self.logits = self.logits + cos.masked_fill(self.index < 0, 0.0)

    def result(self) -> Candidates:
        """:math:`\\mathrm{softmax}(\\hat{S})` of the part's rows, ``k`` columns."""
        return settled(self.logits, self.index, self.k)


def transposed_entries(c: Candidates, nodes: np.ndarray, home: np.ndarray, parts: int
                       ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The entries of the lists ``c`` of rows ``nodes`` as ``(listed node, row node,
    score)``, split by the part (``home``) of the listed node: what
    :func:`~tfgm_dist.refine.merge` adds to the other direction's rows (``parts`` parts)."""
    valid = c.index >= 0
    listed = c.index[valid].numpy()
    row = np.broadcast_to(nodes[:, None], c.index.shape)[valid.numpy()]
    score = c.scores[valid].numpy()
    to = home[listed]
    return [(listed[to == q], row[to == q], score[to == q]) for q in range(parts)]


def merged(own: Candidates, nodes: np.ndarray,
           *received: tuple[np.ndarray, np.ndarray, np.ndarray]) -> Candidates:
    """:func:`~tfgm_dist.refine.merge` for the rows ``nodes``: their lists plus the other
    direction's entries that list them (:func:`transposed_entries`), top ``k``."""
    fm = own.index >= 0
    local = torch.arange(nodes.size)[:, None].expand_as(own.index)
    at = np.concatenate([r for r, _, _ in received]) if received else np.zeros(0, np.int64)
    rows = torch.cat([local[fm], torch.from_numpy(np.searchsorted(nodes, at))])
    cols = torch.cat([own.index[fm], *[torch.from_numpy(c) for _, c, _ in received]])
    vals = torch.cat([own.scores[fm], *[torch.from_numpy(v) for _, _, v in received]])
    return candidates_from_coo(rows, cols, vals, nodes.size, own.k)
