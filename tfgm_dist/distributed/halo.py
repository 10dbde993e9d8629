"""The halo planner, pure: which edges each part builds its rows of the operator from, and
which rows it sends to which other part, layer after layer."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from ..embed import (RoleShare, RowBlock, graph_operator, role_share, row_block,
                     sparse_on_purpose, weighted_degrees, with_roles)
from ..features import undirected_degrees
from ..load.shares import Piece
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
        nodes = torch.from_numpy(self.nodes)
        op = graph_operator(self.edges, self.num_nodes, self.operator,
                            self_loops=self.self_loops, edge_weight=self.weights,
                            degrees=self.degrees, rows=nodes)
        block = row_block(op, nodes)
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


@dataclass(frozen=True)
class PartFacts:
    """What one part learns from the edges that touch its nodes (:func:`part_facts`), all
    that the plans of every part (:func:`exchange`) need of the graph: the part's halo, its
    nodes' degrees, its nodes' share of the relation roles' degrees, and how many edges
    leave it."""

    halo: np.ndarray  # node numbers, ascending
    degrees: torch.Tensor | None  # gcn: its nodes' degree over the whole graph
    role_degrees: torch.Tensor | None  # with roles, mean / gcn: its nodes' then the roles'
    distinct: torch.Tensor | None  # if asked, its nodes' undirected degree
    cut: int  # edges from one of its nodes to another part's


def touching(p: int, block: Piece, part: np.ndarray) -> Piece:
    """The edges of ``block`` (numpy) with an end in part ``p`` (``part``: every node's
    part), their weights, and the relation roles of its nodes."""
    u, v = block.edges
    mask = (part[u] == p) | (part[v] == p)
    return Piece(block.edges[:, mask], None if block.weights is None else block.weights[mask],
                 None if block.roles is None else block.roles[:, part[block.roles[0]] == p])


def part_facts(plan: GraphPart, part: np.ndarray, distinct: bool = False) -> PartFacts:
    """The :class:`PartFacts` of ``plan``, which holds the edges touching its nodes and their
    roles (:func:`touching`; the degrees of its nodes are right over these edges alone,
    other nodes' would not be); ``distinct``: also the degrees of the degree encoding
    (:func:`~tfgm_dist.features.undirected_degrees`)."""
    nodes, n = torch.from_numpy(plan.nodes), plan.num_nodes
    u, v = plan.edges.numpy()
    p = int(part[plan.nodes[0]]) if plan.nodes.size else -1
    on_u, on_v = part[u] == p, part[v] == p
    halo = np.unique(np.concatenate([u[on_v], v[on_u]]))
    if plan.self_loops:
        halo = np.union1d(halo, plan.nodes)
    degrees = None if plan.operator != "gcn" else _degrees(
        plan.edges, plan.weights, n, plan.operator, plan.self_loops)[nodes]
    role_degrees = None
    if plan.num_roles and plan.operator != "sum":
        both = _degrees(*with_roles(plan.edges, plan.weights, n, plan.roles),
                        n + plan.num_roles, plan.operator, plan.self_loops)
        # each role's self-loop once, not once a part (:func:`exchange` adds it back)
        role_degrees = torch.cat([both[nodes], both[n:] - int(plan.self_loops)])
    return PartFacts(halo, degrees, role_degrees,
                     undirected_degrees(plan.edges, n)[nodes] if distinct else None,
                     int((on_u & ~on_v).sum()))  # a cut edge counted at its source


def exchange(facts: list[PartFacts], parting: Partition, num_nodes: int, num_roles: int,
             self_loops: bool) -> list[dict]:
    """Each part's fields of its :class:`GraphPart` from what every part found in the edges
    touching it (:func:`part_facts`): the halo rows it exchanges with the other parts, and
    the degrees over the whole graph that its rows of the operator read. ``O(|V|)`` numbers
    in all, no edge."""
    P = parting.num_parts
    nodes = [parting.nodes(p) for p in range(P)]
    halos = [f.halo for f in facts]
    degrees = None if facts[0].degrees is None else \
        gathered([f.degrees for f in facts], parting)
    role_degrees = None
    if facts[0].role_degrees is not None:
        role_degrees = torch.zeros(num_nodes + num_roles, dtype=facts[0].role_degrees.dtype)
        role_degrees[num_nodes:] = int(self_loops)
        for at, f in zip(nodes, facts):
            role_degrees[torch.from_numpy(at)] = f.role_degrees[:at.size]
            role_degrees[num_nodes:] += f.role_degrees[at.size:]
    owner = [parting.part[h] for h in halos]
    needs = [[q for q in np.unique(owner[p]).tolist() if q != p] for p in range(P)]
    consumers = [[p for p in range(P) if q in needs[p]] for q in range(P)]
    out = []
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
        out.append(dict(degrees=degrees, halo=halos[p], needs=needs[p], gather=gather,
                        consumers=consumers[p], sends=sends, role_degrees=role_degrees))
    return out


def gathered(values: list[torch.Tensor], parting: Partition) -> torch.Tensor:
    """Every node's value from each part's values of its own nodes, in their order."""
    out = torch.zeros(parting.part.size, dtype=values[0].dtype)
    for p, v in enumerate(values):
        out[torch.from_numpy(parting.nodes(p))] = v
    return out


def unplanned(p: int, parting: Partition, num_nodes: int, operator: str, self_loops: bool,
              piece: Piece, num_roles: int) -> GraphPart:
    """Part ``p``'s :class:`GraphPart` before :func:`exchange`: its nodes, and from
    ``piece`` (:func:`touching`) the edges touching them and their relation roles, no halo
    yet."""
    empty = np.empty(0, dtype=np.int64)
    return GraphPart(parting.nodes(p), torch.from_numpy(piece.edges),
                     None if piece.weights is None else torch.from_numpy(piece.weights),
                     num_nodes, operator, self_loops, None, empty, [], empty, [], [],
                     torch.from_numpy(piece.roles) if num_roles else None, num_roles)


def halo_plans(edge_index: torch.Tensor, num_nodes: int, parting: Partition, operator: str,
               self_loops: bool, edge_weight: torch.Tensor | None = None,
               roles: torch.Tensor | None = None) -> list[GraphPart]:
    """Each part's :class:`GraphPart` of a whole graph (:func:`unplanned` with the edges
    touching it, :func:`part_facts`, :func:`exchange`), as the tasks of a Ray run make them
    from a graph's blocks, never holding it whole
    (:func:`~tfgm_dist.distributed.actors.part_of_graph`). The halo of a part is every
    node an edge joins to one of its nodes (the operator is undirected), and its own nodes
    where ``self_loops`` adds them: the columns of its rows of the operator. ``roles``, a
    knowledge graph's relation roles where they join the embedding, go to the parts of
    their nodes (:meth:`GraphPart.role_blocks`)."""
    num_roles = 0 if roles is None or not roles.numel() else int(roles[1].max()) + 1
    whole = Piece(edge_index.numpy(), None if edge_weight is None else edge_weight.numpy(),
                  roles.numpy() if num_roles else None)
    plans = [unplanned(p, parting, num_nodes, operator, self_loops,
                       touching(p, whole, parting.part), num_roles)
             for p in range(parting.num_parts)]
    fields = exchange([part_facts(gp, parting.part) for gp in plans], parting, num_nodes,
                      num_roles, self_loops)
    return [replace(gp, **f) for gp, f in zip(plans, fields)]


def _degrees(edge_index: torch.Tensor, edge_weight: torch.Tensor | None, num_nodes: int,
             operator: str, self_loops: bool) -> torch.Tensor:
    """Every node's :math:`\\tilde{D}` of ``operator`` (mean or gcn) over the whole graph,
    as :func:`~tfgm_dist.embed.graph_operator` computes it: its ``degrees`` for a part."""
    summed = graph_operator(edge_index, num_nodes, "sum", self_loops=self_loops,
                            edge_weight=edge_weight)
    dst = summed.edge_index[1]
    return (torch.bincount(dst, minlength=num_nodes) if operator == "mean"
            else weighted_degrees(dst, summed.edge_weight, num_nodes))
