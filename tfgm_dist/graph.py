"""The canonical graph every loader produces and every later stage consumes.

Nodes are numbered ``0 .. num_nodes - 1`` in the order the loader first saw them (a run
renumbers them in the order of their ids, :meth:`Graph.by_id`); ``ids`` maps those
contiguous numbers back to the user's ids (ints or strings), so that every output can speak
the user's ids again.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from .errors import InputError

if TYPE_CHECKING:  # the loaders import this module
    from .load.tables import NodeContent


@dataclass(frozen=True)
class Held:
    """A graph's edges, weights and relation roles kept out of this process, and how many
    there are: in a Ray run the driver's graphs hold their ids and these handles, the tasks
    that need the edges read them there. Each is a list of object references, one per block
    of the graph (:mod:`tfgm_dist.load.shares`): of ``[2, E_b]`` edges, of ``[E_b]``
    weights or ``None``, of ``[2, M_b]`` roles or ``None``."""

    edges: list[Any]
    weights: list[Any]
    roles: list[Any]
    num_edges: int
    num_roles: int


@dataclass(frozen=True)
class Graph:
    """A graph with contiguous node numbers and the user's ids beside them.

    Attributes:
        ids: user ids, one per node, ``pa.Array`` of int64 or string, length ``N``.
        edge_index: ``[2, E]`` int64 tensor of contiguous node numbers, as given in the input
            (direction kept; the embed stage decides whether to symmetrise).
        edge_weight: optional ``[E]`` float tensor.
        names: optional node text (``list[str]`` of length ``N``) for name features.
        names_from_ids: the names were not given but read from the ids, the local names of
            their URIs (:func:`~tfgm_dist.load.ids.uri_names`): a run with seeds keeps them
            only if the held-out seeds rank better with them than on structure alone.
        features: optional ``[N, d]`` float tensor of given node vectors.
        source: where the graph came from, for error messages and the manifest.
        stats: what the loader counted and dropped (duplicate edges, self-loops, ...).
        content: names and vectors left in the input's ``nodes.parquet``, read by the parts
            of a run on Ray (:class:`~tfgm_dist.load.tables.NodeContent`); ``names`` and
            ``features`` are then ``None`` until :meth:`with_content`.
        roles: optional ``[2, M]`` int64 tensor of a knowledge graph's relation roles,
            ``(node, role)`` once each: relation ``r`` gives role ``2r`` to the heads of its
            triples and ``2r + 1`` to their tails (:func:`~tfgm_dist.pipeline.operators`).
        held: where the edges, weights and roles are when not here (:class:`Held`):
            ``edge_index`` is then empty and ``edge_weight`` and ``roles`` are ``None``.
    """

    ids: pa.Array
    edge_index: torch.Tensor
    edge_weight: torch.Tensor | None = None
    names: list[str] | None = None
    features: torch.Tensor | None = None
    source: str = "<memory>"
    stats: dict[str, int] = field(default_factory=dict)
    names_from_ids: bool = False
    content: NodeContent | None = None
    roles: torch.Tensor | None = None
    held: Held | None = None

    def __post_init__(self) -> None:
        n = len(self.ids)
        if self.edge_index.dim() != 2 or self.edge_index.size(0) != 2:
            raise InputError(f"{self.source}: edge_index must have shape [2, E], "
                             f"got {tuple(self.edge_index.shape)}")
        if self.edge_index.numel() and (int(self.edge_index.min()) < 0
                                        or int(self.edge_index.max()) >= n):
            raise InputError(f"{self.source}: edge endpoints must lie in [0, {n})")
        if self.edge_weight is not None and self.edge_weight.numel() != self.edge_index.size(1):
            raise InputError(f"{self.source}: {self.edge_weight.numel()} edge weights "
                             f"for {self.edge_index.size(1)} edges")
        if self.names is not None and len(self.names) != n:
            raise InputError(f"{self.source}: {len(self.names)} names for {n} nodes")
        if self.features is not None and self.features.size(0) != n:
            raise InputError(f"{self.source}: {self.features.size(0)} feature rows "
                             f"for {n} nodes")
        r = self.roles
        if r is not None and (r.dim() != 2 or r.size(0) != 2 or r.numel() and (
                int(r.min()) < 0 or int(r[0].max()) >= n)):
            raise InputError(f"{self.source}: roles must be [2, M], nodes in [0, {n}), "
                             "roles >= 0")
        if self.content is not None and self.content.rows.size != n:
            raise InputError(f"{self.source}: {self.content.rows.size} content rows for {n} "
                             "nodes")

    @property
    def num_nodes(self) -> int:
        return len(self.ids)

    @property
    def num_edges(self) -> int:
        return self.edge_index.size(1) if self.held is None else self.held.num_edges

    @property
    def num_roles(self) -> int:
        """How many relation roles its nodes play (every role number below it is played)."""
        if self.held is not None:
            return self.held.num_roles
        return 0 if self.roles is None or not self.roles.numel() else int(self.roles[1].max()) + 1

    @property
    def has_names(self) -> bool:
        return self.names is not None or self.content is not None and self.content.has_names

    @property
    def has_features(self) -> bool:
        return (self.features is not None
                or self.content is not None and self.content.has_features)

    @property
    def feature_width(self) -> int:
        """The width of the given vectors, 0 without them."""
        if self.features is not None:
            return self.features.size(1)
        return self.content.width if self.has_features else 0

    def feature_rows(self, nodes: torch.Tensor) -> torch.Tensor:
        """The given vectors of node numbers ``nodes``, read where they are."""
        if self.features is not None:
            return self.features.index_select(0, nodes)
        return self.content.features(nodes.numpy())

    def of_nodes(self, nodes: np.ndarray) -> "Graph":
        """Node numbers ``nodes`` alone, numbered ``0 ..`` in that order, with their ids and
        names, vectors or content, without edges: what a part of a run on Ray makes its
        input rows from."""
        return replace(self, edge_index=torch.zeros(2, 0, dtype=torch.long), edge_weight=None,
                       roles=None, stats={}, held=None, **self._taken(nodes))

    def _taken(self, nodes: np.ndarray) -> dict:
        """The per-node fields of node numbers ``nodes``, in that order."""
        return dict(
            ids=self.ids.take(pa.array(nodes)),
            names=None if self.names is None else [self.names[i] for i in nodes.tolist()],
            features=None if self.features is None else self.features[torch.from_numpy(nodes)],
            content=None if self.content is None else replace(self.content,
                                                              rows=self.content.rows[nodes]))

    def with_content(self) -> "Graph":
        """The graph with its names and vectors read (the graph itself when they were)."""
        if self.content is None:
            return self
        names, features = self.content.read(np.arange(self.num_nodes))
        return replace(self, names=names, features=features, content=None)

    def index_of(self, user_ids: pa.Array | list, what: str,
                 where: Callable[[int], str] | None = None) -> np.ndarray:
        """Contiguous node numbers of ``user_ids``; an unknown id raises :class:`InputError`.

        ``where(i)`` names the place of the ``i``-th id in the user's file (default: its row).
        """
        user_ids = pa.array(user_ids) if not isinstance(user_ids, pa.Array) else user_ids
        if user_ids.type != self.ids.type:
            try:
                user_ids = user_ids.cast(self.ids.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                raise InputError(f"{what}: ids of type {user_ids.type} do not match the "
                                 f"graph's {self.ids.type} ids ({self.source})") from None
        pos = pa.compute.index_in(user_ids, value_set=self.ids)
        missing = np.flatnonzero(pos.is_null().to_numpy(zero_copy_only=False))
        if len(missing):
            i = int(missing[0])
            place = where(i) if where else f"row {i + 1}"
            raise InputError(f"{what}: {place}: id {user_ids[i].as_py()!r} is not a node of "
                             f"{self.source}")
        return pos.to_numpy(zero_copy_only=False).astype(np.int64)

    def has_id(self, user_id: Any) -> bool:
        """Whether ``user_id`` (as read from a text file, or in the ids' own type) is a
        node's id: :meth:`index_of` finds it."""
        try:
            self.index_of([user_id], "")
        except InputError:
            return False
        return True

    def by_id(self) -> "Graph":
        """The same graph with its nodes numbered in the sort order of their ids, whatever
        order the input listed them in."""
        order = pc.sort_indices(self.ids).to_numpy().astype(np.int64)
        if np.array_equal(order, np.arange(order.size)):
            return self
        return self.permuted(torch.from_numpy(order))

    def permuted(self, perm: torch.Tensor) -> "Graph":
        """The same graph with node ``perm[i]`` renumbered ``i``.

        Used to put the target's nodes in a seeded random order, so that no later tie-break
        (FAISS, scipy's assignment) can favour a target whose number equals the source's.
        """
        if self.held is not None:
            raise ValueError(f"{self.source}: its edges are held elsewhere; permute it there")
        inverse = torch.empty_like(perm)
        inverse[perm] = torch.arange(perm.numel())
        roles = None if self.roles is None else torch.stack([inverse[self.roles[0]],
                                                             self.roles[1]])
        return replace(self, edge_index=inverse[self.edge_index], roles=roles,
                       **self._taken(perm.numpy()))
