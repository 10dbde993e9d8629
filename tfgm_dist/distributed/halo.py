"""The halo planner, pure: which edges each part builds its rows of the operator from, and
which rows it sends to which other part, layer after layer."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..embed import (RoleShare, RowBlock, graph_operator, role_share, row_block,
                     sparse_on_purpose, weighted_degrees, with_roles)
from ..partition import Partition


@dataclass(frozen=True)
class GraphPart:
    """What the actor of one part needs of one graph, and what it sends to the others.

    The part's rows of the operator are built by the actor (:meth:`block`) from the edges
    that touch its nodes, so no process builds a whole graph's operator. A layer of part
    ``p`` reads the previous layer's rows of its halo: its own part's rows, which it made,
    and for each other part ``q`` in ``needs`` only the rows of ``q`` in its halo, which
    ``q`` sends as a slice of its output (``sends``), not its whole part.
    """

    nodes: np.ndarray  # the part's node numbers, ascending
    edges: torch.Tensor  # [2, e] the graph's edges with an end among them
    weights: torch.Tensor | None  # [e] their weights, or None
    num_nodes: int
    operator: str  # :func:`~tfgm_dist.embed.graph_operator`'s kind and self-loops
    self_loops: bool
    degrees: torch.Tensor | None  # gcn: every node's weighted degree, [num_nodes]
    halo: np.ndarray  # node numbers whose previous-layer rows a layer reads, ascending
    needs: list[int]  # other parts holding halo rows, in the order their slices are passed
    gather: np.ndarray  # halo rows within [own rows; the needed parts' slices]
    consumers: list[int]  # other parts whose halo holds some of this part's rows
    sends: list[np.ndarray]  # per consumer, the rows of this part it needs (its slice)
    # a knowledge graph's relation roles (:attr:`~tfgm_dist.graph.Graph.roles`): the
    # ``[2, m]`` (node, role) pairs of the part's nodes, how many roles the graph has, and
    # for mean and gcn every node's and role's degree over the edges and the roles
    roles: torch.Tensor | None = None
    num_roles: int = 0
    role_degrees: torch.Tensor | None = None

    def block(self) -> RowBlock:
        """The part's rows of the operator: :func:`~tfgm_dist.embed.row_block` of
        :func:`~tfgm_dist.embed.graph_operator`, the same rows as cut from the whole
        graph's operator (every entry of a node's row comes from an edge that touches it;
        ``gcn`` takes the neighbours' degrees from ``degrees``)."""
        op = graph_operator(self.edges, self.num_nodes, self.operator,
                            self_loops=self.self_loops, edge_weight=self.weights,
                            degrees=self.degrees)
        block = row_block(op, torch.from_numpy(self.nodes))
        if not np.array_equal(block.halo.numpy(), self.halo):
            raise RuntimeError("a part's operator rows read another halo than was planned")
        return block

    def role_blocks(self) -> tuple[RowBlock, RoleShare]:
        """With relation roles, the part's two shares of the operator over the edges and the
        roles (:func:`~tfgm_dist.pipeline.operators`, role ``r`` its node
        ``num_nodes + r``): its nodes' rows, their columns the rows a layer receives as in
        :meth:`stacked` then every role's row, ``[own; each needed part's slice; R]``; and
        its nodes' :class:`~tfgm_dist.embed.RoleShare` of the roles' rows.

        A role joins every node that plays it, in every part: its row is a sum over the
        parts, not a halo row, so the parts add up ``num_roles`` rows each layer instead of
        sending one role's members to one part."""
        n = self.num_nodes
        edges, weights = with_roles(self.edges, self.weights, n, self.roles)
        op = graph_operator(edges, n + self.num_roles, self.operator,
                            self_loops=self.self_loops, edge_weight=weights,
                            degrees=self.role_degrees)
        nodes = torch.from_numpy(self.nodes)
        block = row_block(op, nodes)
        if not np.array_equal(block.halo[block.halo < n].numpy(), self.halo):
            raise RuntimeError("a part's operator rows read another halo than was planned")
        return self.stacked(block, self.num_roles), role_share(op, n, nodes)

    def _stack(self) -> np.ndarray:
        """The node numbers of the rows a layer receives, ``[own; each needed part's
        slice]``, in that order."""
        stack = np.empty(max(self.nodes.size, int(self.gather.max(initial=-1)) + 1),
                         dtype=np.int64)
        stack[:self.nodes.size] = self.nodes
        stack[self.gather] = self.halo
        return stack

    def stacked(self, block: RowBlock, num_roles: int = 0) -> RowBlock:
        """``block`` (:meth:`block`) with its columns renumbered to the rows a layer
        receives, ``[own rows; each needed part's slice]`` (its ``halo`` then the node
        numbers of those rows), so that a layer multiplies them as they arrive; with
        ``num_roles`` (:meth:`role_blocks`) every role's row after them, role ``r`` the
        column of node ``num_nodes + r``. Each row's entries keep their order, so every sum
        is the same, bit for bit. Without the gather of the halo rows (``rows[gather]``) a
        1M-node pair's layer at P = 2 took 0.37 s for a part, against 1.30 s (the gather and
        its new array's page faults)."""
        stack, n, adj = self._stack(), self.num_nodes, block.adj
        to = torch.cat([torch.from_numpy(self.gather),
                        stack.size + block.halo[self.halo.size:] - n])  # graph, then roles
        with sparse_on_purpose():
            renumbered = torch.sparse_csr_tensor(adj.crow_indices(), to[adj.col_indices()],
                                                 adj.values(),
                                                 (adj.size(0), stack.size + num_roles))
        return RowBlock(block.nodes, torch.cat([torch.from_numpy(stack),
                                                n + torch.arange(num_roles)]), renumbered)


def halo_plans(edge_index: torch.Tensor, num_nodes: int, parting: Partition, operator: str,
               self_loops: bool, edge_weight: torch.Tensor | None = None,
               roles: torch.Tensor | None = None) -> list[GraphPart]:
    """Each part's :class:`GraphPart` of one graph without its edges (``edges`` empty): the
    halo rows it exchanges with the other parts, ``O(|V|)`` numbers in all. The halo of a
    part is every node an edge joins to one of its nodes (the operator is undirected), and
    its own nodes where ``self_loops`` adds them: the columns of its rows of the operator.
    A Ray run plans in the task that partitions the graph and cuts each part's edges out in
    a task of its own (:func:`with_edges`): a graph's edges are in the object store once,
    not each part's share of them too (at 1M nodes and P = 2, 1.3 times the edges). ``roles``, a
    knowledge graph's relation roles where they join the embedding, go to the parts of
    their nodes (:meth:`GraphPart.role_blocks`)."""
    P, u, v = parting.num_parts, edge_index[0], edge_index[1]
    part = torch.from_numpy(parting.part)
    on_u, on_v = part[u], part[v]
    # gcn's D^-1/2 of the neighbours too: the whole graph's (mean's rows need their own only)
    degrees = (_degrees(edge_index, edge_weight, num_nodes, operator, self_loops)
               if operator == "gcn" else None)
    nodes = [parting.nodes(p) for p in range(P)]
    halos = [np.unique(torch.cat([u[on_v == p], v[on_u == p]]).numpy()) for p in range(P)]
    if self_loops:
        halos = [np.union1d(h, n) for h, n in zip(halos, nodes)]
    owner = [parting.part[h] for h in halos]
    needs = [sorted(set(owner[p].tolist()) - {p}) for p in range(P)]
    consumers = [[p for p in range(P) if q in needs[p]] for q in range(P)]
    plans = []
    for p in range(P):
        gather = np.empty(halos[p].size, dtype=np.int64)
        own = owner[p] == p
        gather[own] = parting.position[halos[p][own]]
        offset = nodes[p].size
        for q in needs[p]:
            mine = owner[p] == q
            gather[mine] = offset + np.arange(int(mine.sum()))
            offset += int(mine.sum())
        sends = [parting.position[halos[c][owner[c] == p]] for c in consumers[p]]
        no_edges = torch.empty(2, 0, dtype=torch.long)  # not a view: it pickles its storage
        plans.append(GraphPart(nodes[p], no_edges, None, num_nodes, operator, self_loops,
                               degrees, halos[p], needs[p], gather, consumers[p], sends))
    if roles is None or not roles.numel():
        return plans
    num_roles = int(roles[1].max()) + 1
    # a role's row sums over every part: its degree is the whole graph's, over the edges and
    # the roles as pipeline.operators joins them
    role_degrees = (None if operator == "sum" else
                    _degrees(*with_roles(edge_index, edge_weight, num_nodes, roles),
                             num_nodes + num_roles, operator, self_loops))
    on = part[roles[0]]
    return [replace(gp, roles=roles[:, on == p].clone(), num_roles=num_roles,
                    role_degrees=role_degrees) for p, gp in enumerate(plans)]


def _degrees(edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int,
             operator: str, self_loops: bool) -> torch.Tensor:
    """Every node's :math:`\\tilde{D}` of ``operator`` (mean or gcn) over the whole graph,
    as :func:`~tfgm_dist.embed.graph_operator` computes it: its ``degrees`` for a part."""
    summed = graph_operator(edge_index, num_nodes, "sum", self_loops=self_loops,
                            edge_weight=edge_weight)
    dst = summed.edge_index[1]
    return (torch.bincount(dst, minlength=num_nodes) if operator == "mean"
            else weighted_degrees(dst, summed.edge_weight, num_nodes))


def with_edges(plan: GraphPart, edge_index: np.ndarray, edge_weight: np.ndarray | None,
               part: np.ndarray) -> GraphPart:
    """``plan`` (of part ``p``, :func:`halo_plans`) with the edges of ``edge_index``
    (``[2, E]``) that have an end in its part (``part``: every node's part), and their
    weights. The arrays are numpy, as a task reads them from the object store (read-only,
    not copied); the cut-out edges are new tensors."""
    p = int(part[plan.nodes[0]]) if plan.nodes.size else -1
    u, v = edge_index
    touching = (part[u] == p) | (part[v] == p)
    return replace(plan, edges=torch.from_numpy(edge_index[:, touching]),
                   weights=None if edge_weight is None else
                   torch.from_numpy(edge_weight[touching]))
