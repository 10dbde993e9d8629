"""Stage 5, refine: training-free neighbourhood consensus (DGMC without training).

Deep Graph Matching Consensus (Fey et al., 2020) refines an initial soft correspondence
:math:`S` by passing random indicator functions through both graphs; the training-free
version of the paper replaces DGMC's trained MLP by a cosine and its GNN by a weight-free
one. On the sparse top-k candidates :math:`\\mathcal{C}(i)` of each source :math:`i`:

.. math::
    \\hat{S}^{(0)}_{ij} = T \\cdot u_{ij} / B, \\qquad
    S = \\mathrm{softmax}_{j \\in \\mathcal{C}(i)}(\\hat{S})

and for each of the :math:`T` steps

.. math::
    r_s \\sim \\mathcal{N}(0, 1)^{|V_s| \\times R}, \\quad r_t = S^\\top r_s, \\quad
    o_s = \\psi_2(r_s, A_s), \\quad o_t = \\psi_2(r_t, A_t), \\quad
    \\hat{S}_{ij} \\leftarrow \\hat{S}_{ij} + \\cos(o_{s,i}, o_{t,j}),

where :math:`u` is the TFGM score, :math:`B` the number of unit blocks it sums (so the
initial term weighs as much as the :math:`T` refinement terms, as in the paper's code) and
:math:`\\psi_2` the weight-free GNN of :mod:`tfgm_dist.embed`. The result is
:math:`\\mathrm{softmax}(\\hat{S})`. Run in both directions and summed by :func:`merge`.
Memory is ``O((|V_s| + |V_t|) R + |V_s| k)``: nothing dense of size ``|V_s| x |V_t|``.
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from .config import EmbedConfig
from .embed import RowBlock, sparse_on_purpose, embed, layer_params
from .search import Candidates, candidates_from_coo
from .stopwatch import Progress

INDICATOR_CHUNK = 1 << 14  # rows of indicators drawn at a time by a part


def _transpose_csr(index: torch.Tensor, num_targets: int) -> tuple[torch.Tensor, ...]:
    """CSR structure of :math:`S^\\top` for the candidate pattern ``index`` ``[n_s, k]``.

    Returns ``(crow, col, perm)``: the values of step ``t`` are ``S.flatten()[perm]``.
    """
    n_s, k = index.shape
    flat = index.flatten()
    valid = (flat >= 0).nonzero().squeeze(1)
    rows = valid // k
    perm = valid[torch.argsort(flat[valid] * n_s + rows)]
    crow = torch.zeros(num_targets + 1, dtype=torch.long)
    crow[1:] = torch.cumsum(torch.bincount(flat[valid], minlength=num_targets), 0)
    return crow, perm // k, perm


def candidate_cosine(o_s: torch.Tensor, o_t: torch.Tensor, pattern: torch.Tensor
                     ) -> torch.Tensor:
    """``cos(o_s[i], o_t[j])`` at every candidate ``(i, j)`` of ``pattern`` (sparse CSR,
    ``k`` entries per row), as ``[n_s, k]``."""
    return candidate_products(F.normalize(o_s, dim=-1), F.normalize(o_t, dim=-1), pattern)


def candidate_products(o_s: torch.Tensor, o_t: torch.Tensor, pattern: torch.Tensor
                       ) -> torch.Tensor:
    """``o_s[i] . o_t[j]`` at every candidate ``(i, j)`` of ``pattern``, as ``[n_s, k]``:
    torch's sampled dense-dense product (SDDMM), which never forms the ``|V_s| x |V_t|``
    product."""
    sims = torch.sparse.sampled_addmm(pattern, o_s, o_t.T, beta=0.0)
    return sims.values().view(pattern.size(0), -1)


def candidate_pattern(index: torch.Tensor, num_cols: int) -> torch.Tensor:
    """The sparse CSR ``[n, num_cols]`` with an entry at every ``(i, index[i, j])``
    (padding at column 0, masked after), for :func:`candidate_cosine`."""
    n_k = index.numel()
    with sparse_on_purpose():
        return torch.sparse_csr_tensor(torch.arange(0, n_k + 1, index.size(1)),
                                       index.clamp(min=0).flatten(), torch.zeros(n_k),
                                       (index.size(0), num_cols))


def list_width(c: Candidates) -> int:
    """Columns of ``c`` up to its longest real list: past it there is only padding, and a
    pattern wider than :math:`|V_t|` would hold more entries than the dense matrix (SDDMM
    fails). A sharded run takes the largest over its parts, so every part's rows are as
    wide as in one process (a softmax over a wider row may sum in another order)."""
    return max(1, int((c.index >= 0).sum(1).max())) if c.index.numel() else 1


def initial(c: Candidates, width: int, steps: int, scale: float,
            fixed: tuple[torch.Tensor, torch.Tensor] | None = None
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """The candidate pattern ``[n, width]`` and :math:`\\hat{S}^{(0)} = T u / B` on it
    (``-inf`` off the lists); the rows ``fixed[0]`` pinned to their known target
    ``fixed[1]``."""
    index, logits = c.index[:, :width].clone(), c.scores[:, :width] * (steps / scale)
    if fixed is not None:
        index[fixed[0]] = -1
        index[fixed[0], 0] = fixed[1]
        logits[fixed[0]] = -torch.inf
        logits[fixed[0], 0] = 0.0
    return index, logits.masked_fill(index < 0, -torch.inf)


def settled(logits: torch.Tensor, index: torch.Tensor, k: int) -> Candidates:
    """:math:`\\mathrm{softmax}(\\hat{S})` on the pattern, rows re-sorted and padded back to
    ``k`` columns."""
    return padded(Candidates.sorted(torch.softmax(logits, dim=1).nan_to_num(0.0), index), k)


def padded(c: Candidates, k: int) -> Candidates:
    """``c`` padded with ``-1`` / ``-inf`` columns to ``k``."""
    width = c.index.size(1)
    return Candidates(F.pad(c.scores, (0, k - width), value=-torch.inf),
                      F.pad(c.index, (0, k - width), value=-1))


def indicator_rows(gen: torch.Generator, num_nodes: int, dim: int, nodes: np.ndarray
                   ) -> torch.Tensor:
    """The rows ``nodes`` (increasing) of the next ``torch.randn(num_nodes, dim)`` drawn
    from ``gen``: what a part of a sharded refinement keeps of a step's indicators. Drawn
    in chunks (the same numbers as one draw, tested), so it never holds the whole matrix;
    every part draws every row, 0.08 s per 100,000 x 128 on this machine, where a
    counter-based draw of its own rows alone (SplitMix64 and Box-Muller in numpy) took
    0.8 s."""
    out, taken = torch.empty(nodes.size, dim), 0
    for start in range(0, num_nodes, INDICATOR_CHUNK):
        block = torch.randn(min(INDICATOR_CHUNK, num_nodes - start), dim, generator=gen)
        end = int(np.searchsorted(nodes, start + block.size(0)))
        out[taken:end] = block[torch.from_numpy(nodes[taken:end] - start)]
        taken = end
    return out


def refine(c: Candidates, block_s: RowBlock, block_t: RowBlock, *, steps: int, dim: int,
           psi: EmbedConfig, scale: float, seed: int,
           fixed: tuple[torch.Tensor, torch.Tensor] | None = None,
           device: torch.device | str = "cpu") -> Candidates:
    """Consensus-refined correspondence probabilities on the candidates ``c``.

    Args:
        c: source -> target candidates with TFGM scores.
        block_s, block_t: whole-graph row blocks of the source and target operators.
        steps: refinement steps ``T``; dim: width ``R`` of the indicator functions.
        psi: the weight-free :math:`\\psi_2` (its ``layers`` and ``include_input``).
        scale: ``B``, the largest possible TFGM score (number of unit blocks).
        seed: seeds the indicator functions; the same seed gives the same result.
        fixed: known pairs ``(sources, targets)`` (seeds) whose rows are pinned to their
            target: they then carry the known correspondence into every step.
        device: where the steps run; the indicators are drawn on the CPU, so every device
            refines with the same draws.
    Returns:
        Candidates holding :math:`\\mathrm{softmax}(\\hat{S})`, rows re-sorted.
    """
    n_s, n_t = block_s.nodes.numel(), block_t.nodes.numel()
    if c.index.size(0) != n_s:
        raise ValueError(f"candidates have {c.index.size(0)} rows, the source {n_s} nodes")
    index, logits = initial(c, list_width(c), steps, scale, fixed)
    crow, col, perm = _transpose_csr(index, n_t)
    pattern = candidate_pattern(index, n_t).to(device)
    index, logits, crow, col, perm = (t.to(device) for t in (index, logits, crow, col, perm))
    block_s, block_t = block_s.to(device), block_t.to(device)
    # psi_2 is weight-free: built once, not every step
    params = [p.to(device) for p in layer_params(psi, dim)]
    gen = torch.Generator().manual_seed(seed)
    meter = Progress("refine", steps, "steps")
    for _ in range(steps):
        s = torch.softmax(logits, dim=1).nan_to_num(0.0)
        with sparse_on_purpose():
            s_t = torch.sparse_csr_tensor(crow, col, s.flatten()[perm], (n_t, n_s))
        r_s = torch.randn(n_s, dim, generator=gen).to(device)
        o_s = embed(r_s, block_s, psi, params)
        o_t = embed(s_t @ r_s, block_t, psi, params)
        logits = logits + candidate_cosine(o_s, o_t, pattern).masked_fill(index < 0, 0.0)
        meter.advance()
    return settled(logits.cpu(), index.cpu(), c.k)


def decoding(probabilities: Candidates, o_s: torch.Tensor, o_t: torch.Tensor, weight: float,
             rows_t: torch.Tensor | None = None) -> Candidates:
    """What a one-to-one decoding of refined lists maximises: the ``probabilities`` (rows of
    ``o_s``) plus ``weight`` times the TFGM score :math:`u_{ij} = o_{s,i} \\cdot o_{t,j}`
    (``weight`` over :math:`B` makes it relative to the largest score). ``rows_t``: the row of
    ``o_t`` of each listed target (``[n, k]``), where ``o_t`` holds only those; else the
    targets are its rows.

    The probabilities alone are flat below a row's best: a source the matching displaces
    loses as little by its 50th candidate as by its second, and the matching then chains
    such swaps. The score tells them apart (DBP15k with seeds, one-to-one: 96.5 / 98.9 / 99.4
    on the probabilities, 95.3 / 98.5 / 99.4 on the scores, 96.8 / 99.1 / 99.5 on both)."""
    width = list_width(probabilities)  # past it only padding, which SDDMM must not see
    index = probabilities.index[:, :width]
    rows_t = index if rows_t is None else rows_t[:, :width]
    if not o_t.size(0):  # no targets: the pattern's padding column must exist
        o_t = o_t.new_zeros((1, o_s.size(1)))
    u = candidate_products(o_s, o_t, candidate_pattern(rows_t, o_t.size(0)))
    return padded(Candidates.sorted(probabilities.scores[:, :width] + weight * u, index),
                  probabilities.k)


def merge(forward: Candidates, backward: Candidates, k: int) -> Candidates:
    """``S_fwd + S_bwdᵀ`` over the union of both candidate patterns, top ``k`` per source.

    ``forward`` has source rows; ``backward`` has target rows listing source numbers.
    """
    n_s, n_t = forward.index.size(0), backward.index.size(0)
    fr = torch.arange(n_s)[:, None].expand_as(forward.index)
    br = torch.arange(n_t)[:, None].expand_as(backward.index)
    fm, bm = forward.index >= 0, backward.index >= 0
    rows = torch.cat([fr[fm], backward.index[bm]])
    cols = torch.cat([forward.index[fm], br[bm]])
    vals = torch.cat([forward.scores[fm], backward.scores[bm]])
    return candidates_from_coo(rows, cols, vals, n_s, k)
