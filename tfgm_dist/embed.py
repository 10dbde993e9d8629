"""Stage 3, embed: a weight-free GNN, layer by layer, over row blocks of the graph operator.

For an operator :math:`\\hat{A}` (sum, mean/SAGE or symmetric/GCN) and input features X,

.. math::
    F^{(0)} = \\mathrm{norm}(X), \\qquad
    F^{(l)} = \\mathrm{norm}\\big(\\hat{A}\\, \\sigma(F^{(l-1)})\\, W_l + b_l\\big), \\qquad
    O = [F^{(0)}; F^{(1)}; \\dots; F^{(L)}]

with row-wise L2 normalisation and, by default, :math:`W_l = I` (weight-free, principle P3),
:math:`b_l = 0` and :math:`\\sigma = \\mathrm{id}`, so that :math:`\\langle O_i, O_j \\rangle`
is the sum of per-layer cosines (principle P1). The ablations of the paper are switches:
random weights :math:`W_l \\sim \\mathcal{N}(0, 1/d)`, ReLU as :math:`\\sigma`, and BasicTFGM
(:math:`F^{(l)} \\leftarrow F^{(l)} + F^{(l-1)}`, last layer only). A random bias
:math:`b_l \\sim \\mathcal{N}(0, \\beta^2/d)` is the one addition: the paper's reference code
adds one to its weight-free layers, and it is worth several points on featureless graphs.

Layer 1 propagates :math:`F^{(0)} = \\mathrm{norm}(X)`, where the paper's Algorithm 1
propagates the raw :math:`X`: so a neighbour's share of a sum does not depend on the scale of
its input row (raw attribute counts, word counts of names). Measured with no config file,
raw against normalised: yeast (10 runs) 82.9 / 77.6 / 74.1 / 65.7 / 57.8 against 82.5 / 77.9
/ 74.2 / 65.6 / 57.4, DBP15k zh_en with seeds Hits@1 94.4 against 94.2: within the noise.

A layer only needs a node block's rows of :math:`\\hat{A}` and the previous layer's rows of the
block's 1-hop halo (:class:`RowBlock`), which is what a partitioned run distributes; the
single-process run is the same code with one block holding every node.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from .config import OPERATORS, EmbedConfig


@dataclass(frozen=True)
class Operator:
    """The weighted edges ``(j -> i, w)`` of a graph operator :math:`\\hat{A}_{ij} = w`."""

    edge_index: torch.Tensor  # [2, E], row 0 = source j, row 1 = destination i
    edge_weight: torch.Tensor  # [E]
    num_nodes: int


def graph_operator(edge_index: torch.Tensor, num_nodes: int, kind: str = "sum", *,
                   self_loops: bool = True, directed: bool = False,
                   edge_weight: torch.Tensor | None = None,
                   degrees: torch.Tensor | None = None,
                   rows: torch.Tensor | None = None) -> Operator:
    """Build :math:`\\hat{A}` from an edge list.

    ``sum``: :math:`\\tilde{A}`; ``mean`` (GraphSAGE): :math:`\\tilde{D}^{-1}\\tilde{A}`;
    ``gcn``: :math:`\\tilde{D}^{-1/2}\\tilde{A}\\tilde{D}^{-1/2}`, where
    :math:`\\tilde{A} = A + I` when ``self_loops`` and :math:`A` otherwise, the degree
    :math:`\\tilde{D}` summing a node's incoming weights (``mean``: counting them). Edges are
    made undirected unless ``directed``; a repeated edge counts once, at its largest weight,
    and a self-loop already given keeps its weight. ``degrees`` gives every node's
    :math:`\\tilde{D}` where ``edge_index`` holds only some nodes' edges (a part's), and
    ``rows`` keeps only those nodes' rows: the entries of the others, and their
    self-loops, are never made (a part actor of the 3M pair at P = 4 had made every node's
    self-loop and both directions of its cut edges, then cut them away, :func:`row_block`).

    What PyG's ``to_undirected(reduce="max")``, ``add_remaining_self_loops``, ``coalesce``
    and ``gcn_norm`` compute (``tests/test_embed.py`` checks it against them), in plain torch:
    importing PyG costs 2.8 s per process on this machine (it loads ``torch._dynamo``), more
    than a whole yeast alignment, and every run and Ray worker would pay it for these four
    lines of arithmetic.
    """
    if kind not in OPERATORS:
        raise ValueError(f"unknown operator {kind!r}; choose one of {OPERATORS}")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"edge_index must be [2, E], got shape {tuple(edge_index.shape)}")
    src, dst = edge_index
    w = torch.ones(src.numel()) if edge_weight is None else edge_weight
    if not directed:
        src, dst, w = torch.cat([src, dst]), torch.cat([dst, src]), torch.cat([w, w])
    if rows is not None:
        kept = torch.zeros(num_nodes, dtype=torch.bool)
        kept[rows] = True
        mine = kept[dst]
        src, dst, w = src[mine], dst[mine], w[mine]
    if self_loops:
        free = torch.ones(num_nodes, dtype=torch.bool) if rows is None else kept
        free[src[src == dst]] = False
        free = free.nonzero().flatten()
        src, dst = torch.cat([src, free]), torch.cat([dst, free])
        w = torch.cat([w, torch.ones(free.numel(), dtype=w.dtype)])
    key, at = torch.unique(src * num_nodes + dst, return_inverse=True)  # sorted: by source
    w = torch.zeros(key.numel(), dtype=w.dtype).scatter_reduce(0, at, w, "amax",
                                                               include_self=False)
    src, dst = key // num_nodes, key % num_nodes
    # ``degrees``: given where only some nodes' edges are (a part's); mean counts entries
    if kind == "mean":
        counts = torch.bincount(dst, minlength=num_nodes) if degrees is None else degrees
        w = w / counts.clamp(min=1)[dst].to(w.dtype)
    elif kind == "gcn":
        inv_sqrt = (weighted_degrees(dst, w, num_nodes) if degrees is None else degrees
                    ).pow(-0.5)
        inv_sqrt = inv_sqrt.masked_fill(torch.isinf(inv_sqrt), 0.0)
        w = inv_sqrt[src] * w * inv_sqrt[dst]
    return Operator(torch.stack([src, dst]), w, num_nodes)


def with_roles(edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int,
               roles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``edge_index`` (and ``edge_weight``) with an edge of weight 1 from each node to every
    relation role it plays: ``roles`` ``[2, M]`` ``(node, role)``, role ``r`` the node
    ``num_nodes + r`` of the operator (:func:`tfgm_dist.pipeline.operators`)."""
    edges = torch.cat([edge_index, torch.stack([roles[0], num_nodes + roles[1]])], dim=1)
    weight = (None if edge_weight is None
              else torch.cat([edge_weight, edge_weight.new_ones(roles.size(1))]))
    return edges, weight


@dataclass(frozen=True)
class RoleShare:
    """Some nodes' share of a graph's relation-role rows, where the roles are nodes of the
    operator after the graph's own (:func:`tfgm_dist.pipeline.operators`): ``share``
    ``[R, n]`` sparse CSR, the role rows' entries of those ``n`` nodes (columns: their
    positions); ``loops`` ``[R]``, each role's self-loop entry (zeros without).

    A role joins every node that plays it, across any partition of the nodes: its row of
    :math:`\\hat{A} H` is the sum of the shares of all nodes (:func:`role_partial`), added
    up in float64 so that the parts of a Ray run, in any order, round it to one process's
    float32 row (exact sums in another order differ by about 1e-16 of the value)."""

    share: torch.Tensor
    loops: torch.Tensor

    def to(self, device: torch.device | str) -> "RoleShare":
        """The share on ``device``."""
        return RoleShare(self.share.to(device), self.loops.to(device))


def role_share(op: Operator, num_nodes: int, nodes: torch.Tensor) -> RoleShare:
    """The :class:`RoleShare` of ``nodes`` (sorted numbers below ``num_nodes``) in ``op``,
    whose nodes from ``num_nodes`` on are roles: every entry of a role's row from one of
    ``nodes`` must be in ``op`` (a part's operator holds its nodes' roles)."""
    (src, dst), w = op.edge_index, op.edge_weight
    num_roles = op.num_nodes - num_nodes
    position = torch.full((op.num_nodes,), -1, dtype=torch.long)
    position[nodes] = torch.arange(nodes.numel())
    member = (dst >= num_nodes) & (position[src] >= 0)
    with sparse_on_purpose():
        share = torch.sparse_coo_tensor(
            torch.stack([dst[member] - num_nodes, position[src[member]]]), w[member],
            (num_roles, nodes.numel())).coalesce().to_sparse_csr()
    looped = (src == dst) & (dst >= num_nodes)
    loops = torch.zeros(num_roles, dtype=w.dtype).index_put_((dst[looped] - num_nodes,),
                                                             w[looped])
    return RoleShare(share, loops)


def role_partial(roles: RoleShare, t_own: torch.Tensor, t_roles: torch.Tensor | None
                 ) -> torch.Tensor:
    """``[R, d]`` float64: the share's part of the roles' rows of :math:`\\hat{A} T` for
    ``t_own``, its nodes' rows of ``T`` (:func:`transformed`), plus the self-loops times
    ``t_roles`` (the roles' rows) where given: one share of all must add them, once."""
    out = roles.share.double() @ t_own.double()
    if t_roles is not None:
        out += roles.loops.double()[:, None] * t_roles.double()
    return out


def role_layer(partials: list[torch.Tensor], params: LayerParams, before: torch.Tensor | None,
               basic: bool) -> torch.Tensor:
    """A layer's rows of the roles from the :func:`role_partial` of all nodes, added up in
    their order, then the layer's bias and norm as :func:`layer` finishes every row;
    BasicTFGM adds the residual ``before`` (the previous rows; ``None``: zeros)."""
    pre = partials[0].clone()
    for partial in partials[1:]:
        pre += partial
    out = finished(pre.float(), params)
    if basic:
        out = F.normalize(out if before is None else out + before, dim=-1)
    return out


def weighted_degrees(dst: torch.Tensor, weight: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """Each node's summed incoming weight: the ``gcn`` operator's :math:`\\tilde{D}`."""
    return torch.zeros(num_nodes, dtype=weight.dtype).index_add_(0, dst, weight)


@dataclass(frozen=True)
class RowBlock:
    """The rows of :math:`\\hat{A}` for ``nodes``, with columns relabelled to the ``halo``.

    ``adj`` is a ``[len(nodes), len(halo)]`` sparse CSR tensor; one layer of the block is
    ``adj @ H[halo]``.
    """

    nodes: torch.Tensor  # [n] node numbers of the block's rows
    halo: torch.Tensor  # [h] node numbers whose previous-layer rows the block needs
    adj: torch.Tensor  # sparse CSR [n, h]

    def __reduce__(self) -> tuple:
        # Ray ships blocks to its workers; unpickling a CSR tensor there warned "beta state"
        # once in every worker's log. Its parts travel as dense tensors instead.
        a = self.adj
        return _block_of, (self.nodes, self.halo, a.crow_indices(), a.col_indices(), a.values(),
                           tuple(a.shape))

    def to(self, device: torch.device | str) -> "RowBlock":
        """The block with its adjacency on ``device`` (the node numbers stay on the CPU)."""
        return replace(self, adj=self.adj.to(device))


def _block_of(nodes: torch.Tensor, halo: torch.Tensor, crow: torch.Tensor, col: torch.Tensor,
              values: torch.Tensor, shape: tuple[int, int]) -> RowBlock:
    with sparse_on_purpose():
        return RowBlock(nodes, halo, torch.sparse_csr_tensor(crow, col, values, shape))


def row_block(op: Operator, nodes: torch.Tensor) -> RowBlock:
    """Cut the block of ``nodes`` (sorted node numbers) out of ``op``.

    Built as CSR directly, rows and columns numbered through position maps and the entries
    put in order by one sort (``op`` holds each edge once): through a COO tensor's
    ``coalesce`` and ``searchsorted`` a 1M-node graph's whole block took 3.7 s, so 1.4 s."""
    if nodes.numel() > 1 and not bool((nodes[1:] > nodes[:-1]).all()):
        raise ValueError("row_block needs strictly increasing node numbers")
    position = torch.full((op.num_nodes,), -1, dtype=torch.long)
    position[nodes] = torch.arange(nodes.numel())
    row = position[op.edge_index[1]]
    keep = row >= 0
    src, row, w = op.edge_index[0, keep], row[keep], op.edge_weight[keep]
    seen = torch.zeros(op.num_nodes, dtype=torch.bool)
    seen[src] = True
    halo = seen.nonzero().flatten()
    position.fill_(-1)
    position[halo] = torch.arange(halo.numel())
    col = position[src]
    order = torch.sort(row * halo.numel() + col).indices
    crow = torch.zeros(nodes.numel() + 1, dtype=torch.long)
    crow[1:] = torch.cumsum(torch.bincount(row, minlength=nodes.numel()), 0)
    with sparse_on_purpose():
        return RowBlock(nodes, halo, torch.sparse_csr_tensor(crow, col[order], w[order],
                                                             (nodes.numel(), halo.numel())))


@contextmanager
def sparse_on_purpose() -> Iterator[None]:
    """Silence, within the block only, the warnings torch gives on the sparse tensors it
    builds (CSR "beta state", and on the first sparse tensor of a process "invariant checks
    disabled"): this project builds them on purpose."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta state")
        warnings.filterwarnings("ignore", message="Sparse invariant checks are implicitly")
        yield


def propagate(block: RowBlock, h_halo: torch.Tensor) -> torch.Tensor:
    """:math:`\\hat{A}_{\\text{rows}}\\, H_{\\text{halo}}`: one sparse CSR product.

    This is what PyG's weight-free ``SimpleConv(aggr="sum")`` computes on a CSR adjacency,
    bit for bit; the conv itself is not used because each process that builds one writes
    its generated ``propagate`` module to a temporary file that PyG never deletes (2,006 of
    them had gathered in this machine's /tmp).
    """
    if h_halo.size(0) != block.halo.numel():
        raise ValueError(f"h_halo has {h_halo.size(0)} rows, the block's halo "
                         f"{block.halo.numel()}")
    return block.adj @ h_halo


@dataclass(frozen=True)
class LayerParams:
    """The random parts of a layer: ``weight`` ``[d, d]`` and ``bias`` ``[d]``, or ``None``."""

    weight: torch.Tensor | None = None
    bias: torch.Tensor | None = None

    def to(self, device: torch.device | str) -> "LayerParams":
        """The same draws on ``device``."""
        return LayerParams(*(None if t is None else t.to(device) for t in (self.weight, self.bias)))


def layer_params(cfg: EmbedConfig, dim: int, seed: int = 0) -> list[LayerParams]:
    """The per-layer ``W_l`` and ``b_l`` of ``cfg``, drawn from ``seed``.

    Both graphs of a pair must use the same draws, so they are drawn once per run.
    """
    gen = torch.Generator().manual_seed(seed)
    params = []
    for _ in range(cfg.layers):
        w = torch.randn(dim, dim, generator=gen) / dim ** 0.5 if cfg.random_weights else None
        b = cfg.bias * torch.randn(dim, generator=gen) / dim ** 0.5 if cfg.bias else None
        params.append(LayerParams(w, b))
    return params


def layer(block: RowBlock, h_halo: torch.Tensor, params: LayerParams,
          relu: bool) -> torch.Tensor:
    """One layer for one block: ``norm(A_rows (sigma(H) W)_halo + b)``; returns ``[n, d]``."""
    # propagate makes a new tensor: finished scales it in place
    return finished(propagate(block, transformed(h_halo, params, relu)), params)


def transformed(h: torch.Tensor, params: LayerParams, relu: bool) -> torch.Tensor:
    """The first half of :func:`layer`, before the product: ``sigma(H) W``."""
    if relu:
        h = F.relu(h)
    return h if params.weight is None else h @ params.weight


def finished(out: torch.Tensor, params: LayerParams) -> torch.Tensor:
    """The second half of :func:`layer`, after the product: ``norm(out + b)``, in place."""
    if params.bias is not None:
        out.add_(params.bias)
    return unit_rows_(out)


def unit_rows_(x: torch.Tensor) -> torch.Tensor:
    """``x`` with every row divided by its norm (at least 1e-12), in place: the arithmetic of
    ``F.normalize``, bit for bit, without its new tensor (a 1M x 128 layer: 0.31 s with the
    allocation's page faults, 0.04 s in place)."""
    return x.div_(torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min_(1e-12))


def whole(op: Operator) -> RowBlock:
    """The single block holding every row of ``op`` (the single-process run)."""
    return row_block(op, torch.arange(op.num_nodes))


def embed(x: torch.Tensor, block: RowBlock, cfg: EmbedConfig,
          params: list[LayerParams] | None = None) -> torch.Tensor:
    """Single-process embedding of all nodes of ``block = whole(op)``: ``[N, num_blocks * d]``,
    the :func:`embed_blocks` side by side.

    ``params`` defaults to :func:`layer_params` of ``cfg`` with seed 0; pass one list for
    both graphs of a pair.
    """
    return torch.cat(list(embed_blocks(x, block, cfg, params)), dim=-1)


def embed_blocks(x: torch.Tensor, block: RowBlock, cfg: EmbedConfig,
                 params: list[LayerParams] | None = None, roles: RoleShare | None = None
                 ) -> Iterator[torch.Tensor]:
    """The unit-norm blocks of :func:`embed`, one at a time, each ``[N, d]``: the normalised
    input when kept, then every layer's output (BasicTFGM: the last one only). A caller
    that places each block where it wants it never holds them twice: both graphs of a
    1M-node pair, 3 blocks of 128, took 18.7 s with every block and its scaled copy
    concatenated, 11.1 s written in place (:func:`tfgm_dist.pipeline.embeddings`), 10.1 s
    with each layer normalised in place (:func:`unit_rows_`).

    ``roles``: where the operator's nodes after the graph's are relation roles, ``block``
    holds the graph's rows of it and ``roles`` every node's share of the roles' rows
    (:func:`role_share`), which have no input and are not returned."""
    if x.size(0) != block.nodes.numel():
        raise ValueError(f"x has {x.size(0)} rows, the graph {block.nodes.numel()} nodes")
    params = layer_params(cfg, x.size(1)) if params is None else params
    h = F.normalize(x.float(), dim=-1)
    if cfg.include_input and not cfg.basic:
        yield h
    n = h.size(0)
    num_roles = 0 if roles is None else roles.loops.numel()
    every = block.halo.numel() == n + num_roles  # every node, in order: no gather
    r = None  # the roles' rows of the previous layer; the input's are zeros
    for l, p in enumerate(params):
        if roles is None:
            out = layer(block, h if every else h[block.halo], p, cfg.relu)
        else:
            t = transformed(torch.cat([h, h.new_zeros(num_roles, h.size(1)) if r is None
                                       else r]), p, cfg.relu)
            out = finished(propagate(block, t if every else t[block.halo]), p)
            if l + 1 < len(params):
                r = role_layer([role_partial(roles, t[:n], t[n:])], p, r, cfg.basic)
        h = F.normalize(out + h, dim=-1) if cfg.basic else out
        if not cfg.basic:
            yield h
    if cfg.basic:
        yield h
