"""Stage 1, load, in shares: a Parquet layout's edges read by several workers, none of which
holds a whole graph (a run on Ray, :func:`tfgm_dist.distributed.loaded`).

1. The driver reads the footers and ``nodes.parquet``'s ids (:func:`plan`) and cuts the
   edge files' row groups into shares of about equal rows (:func:`cut`).
2. A worker per share reads and checks its rows (:func:`read`) and returns the distinct ids
   and relations it met (:func:`met`).
3. The driver numbers the nodes as one process does (``nodes.parquet``'s ids, or the ids
   the shares met, :func:`~tfgm_dist.pipeline.ordered`) and sorts the relations.
4. A worker per share numbers its edges, drops its self-loops and cuts its edges and
   relation roles into ``B`` blocks by the source's node number (:func:`numbered`).
5. A worker per block joins that block of every share and keeps the first of repeated edges
   in file order (shares are in file order, and each in its rows' order) (:func:`joined`).

The blocks are one process's :func:`~tfgm_dist.load.load_graph` then
:func:`~tfgm_dist.pipeline.ordered`: the same ids in the same order, the same edges with the
same weights, the same relation roles and counts. Only the order of the edges differs
(block by block), which no stage reads: every operator sorts its edges
(:func:`~tfgm_dist.embed.operator`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .formats import EdgeRows, LayoutFiles, edge_rows, layout_files
from .ids import Rows, codes_in, first_of_each, relation_roles, relation_values
from .tables import row_groups, streamed_batches


@dataclass(frozen=True)
class Share:
    """The row groups ``(file, row group)`` one worker reads, in file order; ``offset``: the
    rows of the edge table before them (errors name rows of the whole table)."""

    pieces: tuple[tuple[str, int], ...]
    offset: int


@dataclass(frozen=True)
class Plan:
    """A layout's files (:class:`~.formats.LayoutFiles`, its node ids only) and the shares
    of its edges."""

    files: LayoutFiles
    shares: list[Share]

    @property
    def node_ids(self) -> pa.Array | None:
        nodes = self.files.nodes
        return None if nodes is None else nodes.column("id").combine_chunks()


def cut(groups: list[tuple[str, int, int]], count: int) -> list[Share]:
    """``groups`` (``(file, row group, rows)`` in file order) cut into at most ``count``
    shares of consecutive row groups, each about ``1 / count`` of the rows; empty row groups
    and empty shares are left out."""
    total = sum(rows for _, _, rows in groups)
    shares: dict[int, list[tuple[str, int]]] = {}
    offsets: dict[int, int] = {}
    before = 0
    for name, group, rows in groups:
        if rows:
            i = before * count // total
            shares.setdefault(i, []).append((name, group))
            offsets.setdefault(i, before)
        before += rows
    return [Share(tuple(shares[i]), offsets[i]) for i in sorted(shares)]


def plan(path: Path, names: dict[str, str], count: int) -> Plan:
    """The :class:`Plan` of the Parquet layout at ``path`` read in at most ``count`` shares:
    only metadata and ``nodes.parquet``'s ids are read (the names and vectors are left
    there, :attr:`~tfgm_dist.graph.Graph.content`)."""
    files = layout_files(path, names, deferred=True)
    shares = cut(row_groups(files.edges_path), count)
    if not shares:
        raise InputError(f"{files.edges_path}: no edges")
    return Plan(files, shares)


def read(layout: Plan, share: Share) -> EdgeRows:
    """The checked edge rows of ``share`` (:func:`~.formats.edge_rows`)."""
    f = layout.files
    return edge_rows(streamed_batches(f.edges_path, list(f.columns.values()), share.pieces),
                     f.columns, f.edges_path, share.offset)


def met(rows: EdgeRows, edges_path: Path, listed: bool) -> tuple[pa.Array | None,
                                                                 pa.Array | None]:
    """The distinct ids of ``rows`` (``None`` where the nodes are ``listed`` in
    ``nodes.parquet``) and their distinct relations (``None`` without)."""
    ids = None
    if not listed:
        if rows.src.type != rows.dst.type:
            raise InputError(f"{edges_path}: src ids are {rows.src.type} but dst ids are "
                             f"{rows.dst.type}")
        ids = pc.unique(pa.concat_arrays([rows.src, rows.dst]))
    return ids, None if rows.relations is None else pc.unique(rows.relations)


def met_ids(ids: list[pa.Array], edges_path: Path) -> pa.Array:
    """The distinct ids met by every share (:func:`met`), of one type as one file's are."""
    types = {str(i.type) for i in ids}
    if len(types) > 1:
        raise InputError(f"{edges_path}: ids are {' in some files and '.join(sorted(types))} "
                         "in others")
    return pc.unique(pa.concat_arrays(ids))


def relations_of(met_relations: list[pa.Array | None]) -> pa.Array | None:
    """Every relation the shares met, sorted (:func:`~.ids.relation_values`)."""
    if met_relations[0] is None:
        return None
    return relation_values(pa.concat_arrays(met_relations))


@dataclass(frozen=True)
class Piece:
    """Some of a graph's edges, their weights and relation roles: a share's whose node (the
    source of an edge) lies in one block, in the share's order; or a block's that touch one
    part (:func:`~tfgm_dist.distributed.halo.touching`)."""

    edges: np.ndarray  # [2, E] int64 node numbers
    weights: np.ndarray | None  # [E] float32
    roles: np.ndarray | None  # [2, M] (node, role)


def block_of(nodes: np.ndarray, num_nodes: int, blocks: int) -> np.ndarray:
    """The block of each node number: block ``b`` holds ``[b N / B, (b + 1) N / B)``."""
    return nodes * blocks // num_nodes


def numbered(rows: EdgeRows, layout: Plan, share: Share, ids: pa.Array,
             relations: pa.Array | None, blocks: int) -> tuple[int, list[Piece]]:
    """``share``'s rows numbered by ``ids`` (the graph's, in node order; an id not there is
    the error of one process's load, naming its row), its self-loops dropped and counted,
    cut into ``blocks`` :class:`Piece` by source. The roles are every row's, self-loops
    included, as one process's (:func:`~.ids.relation_roles` over ``relations``)."""
    f = layout.files
    at = Rows(f.edges_path, [rows.src, rows.dst], offset=share.offset)
    src = codes_in(at, 0, ids, f.nodes_path)
    dst = codes_in(at, 1, ids, f.nodes_path)
    roles = None if relations is None else relation_roles(rows.relations, src, dst, relations)
    kept = src != dst
    loops = int(kept.size - kept.sum())
    src, dst = src[kept], dst[kept]
    weight = None if rows.weight is None else rows.weight[kept]
    where = block_of(src, len(ids), blocks)
    role_where = None if roles is None else block_of(roles[0], len(ids), blocks)
    pieces = []
    for b in range(blocks):
        mine = where == b
        pieces.append(Piece(np.stack([src[mine], dst[mine]]),
                            None if weight is None else weight[mine],
                            None if roles is None else roles[:, role_where == b]))
    return loops, pieces


def joined(pieces: list[Piece], num_nodes: int) -> tuple[Piece, int]:
    """One block of every share (``pieces`` in share order) as the block of the graph: the
    first of each repeated edge kept, with its weight; the roles once each. Returns the block
    and how many repeated edges it dropped."""
    edges = np.concatenate([p.edges for p in pieces], axis=1)
    kept = first_of_each(edges[0], edges[1], num_nodes)
    weights = None if pieces[0].weights is None else \
        np.concatenate([p.weights for p in pieces])[kept]
    roles = None if pieces[0].roles is None else \
        np.unique(np.concatenate([p.roles for p in pieces], axis=1), axis=1)
    return Piece(np.ascontiguousarray(edges[:, kept]), weights, roles), \
        edges.shape[1] - kept.size
