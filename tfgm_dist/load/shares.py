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

A text edge list is cut alike (:func:`text_plan`): the driver reads its first lines (is
there a header, how many columns) and finds where each of about equal byte ranges starts a
line; a worker per range counts its lines, so that each range's first line number is
known, then a worker per range reads and checks its lines (:func:`text_share`) and steps
3-5 follow, the ids integers where every range's are.

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
from .formats import EdgeRows, LayoutFiles, edge_list_weights, edge_rows, layout_files
from .ids import Rows, all_integers, codes_in, first_of_each, relation_roles, relation_values
from .tables import (COMPRESSED, check_column_count, decoded, fields_as_rows, row_groups,
                     spelled_like_column, starts_with_header, streamed_batches, text_delimiter,
                     text_fields)

# A text edge list is read in byte ranges, one a part, where each holds at least this many
# bytes; a smaller one is read by one task, faster. A 94 MiB TSV of 5M edges (two quoted
# string ids a line), both graphs at once on 2 cores: one task a graph 8.5 s, its worker's
# heap 1.02 GiB; 2 ranges 11.8 s, 0.67 GiB; 4 ranges 18.4 s, 0.47 GiB. A task holds about
# 8 bytes for each byte of text it reads.
TEXT_SHARE_BYTES = 1 << 27


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


@dataclass(frozen=True)
class TextPlan:
    """A text edge list read in byte ranges ``(start, end)``, each starting a line: its
    delimiter, whether its first data line is a header, and ``like``, the column count and
    line number of its first edge, which every line must match."""

    path: Path
    delim: str | None
    header: bool
    like: tuple[int, int]
    ranges: list[tuple[int, int]]


def text_plan(path: Path, count: int) -> TextPlan | None:
    """The :class:`TextPlan` of the edge list at ``path`` in at most ``count`` ranges of at
    least :data:`TEXT_SHARE_BYTES`; ``None`` where one worker reads it whole: a compressed file,
    one too small for two ranges, one whose first lines are no edges of 2 or 3 columns
    (its error is one process's), and one whose first line is spelled like a column name
    (:data:`~.tables.COLUMN_NAME`): only the whole file tells whether its ids recur below."""
    if path.suffix.lower() in COMPRESSED or not path.is_file():
        return None
    size = path.stat().st_size
    count = min(count, size // TEXT_SHARE_BYTES)
    if count < 2:
        return None
    delim = text_delimiter(path)
    head = _head(path, delim)
    if head is None:
        return None
    fields, lines = head
    header = bool(starts_with_header(fields, delim is not None))
    if not header and spelled_like_column(fields):
        return None
    width = len(fields[int(header)])
    if width not in (2, 3):
        return None
    starts = sorted({_line_start(path, i * size // count) for i in range(count)} | {size})
    return TextPlan(path, delim, header, (width, int(lines[int(header)])),
                    list(zip(starts[:-1], starts[1:])))


def _head(path: Path, delim: str | None) -> tuple[pa.ListArray, np.ndarray] | None:
    """The fields and line numbers of the first three data lines of ``path`` (its complete
    lines only), ``None`` where its first MiB has fewer or is not UTF-8."""
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    try:
        text = data[:data.rfind(b"\n") + 1].decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    fields, lines = text_fields(text, delim)
    return (fields[:3], lines[:3]) if len(fields) >= 3 else None


def _line_start(path: Path, at: int) -> int:
    """The first byte of the line that starts at or after byte ``at`` of ``path`` (its
    size where none does)."""
    if at == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(at - 1)
        while chunk := f.read(1 << 16):
            newline = chunk.find(b"\n")
            if newline >= 0:
                return at + newline
            at += len(chunk)
    return at - 1


def line_count(path: Path, start: int, end: int) -> int:
    """The line breaks in bytes ``[start, end)`` of ``path``."""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read(end - start).count(b"\n")


def text_share(plan: TextPlan, r: int, first_line: int) -> tuple[EdgeRows, bool]:
    """Range ``r`` of ``plan``, whose first line is line ``first_line`` of the file, read
    and checked as one process reads those lines (:func:`~.tables.read_text_rows`): its
    edge rows (ids as strings), and whether every id of them is an integer."""
    start, end = plan.ranges[r]
    with open(plan.path, "rb") as f:
        f.seek(start)
        data = f.read(end - start)
    fields, lines = text_fields(decoded(data, plan.path, first_line), plan.delim, first_line)
    if start == 0 and plan.header:
        fields, lines = fields[1:], lines[1:]
    check_column_count(plan.path, pc.list_value_length(fields).to_numpy(), lines, plan.like)
    rows = fields_as_rows(plan.path, fields, lines, plan.like[0], plan.delim)
    src, dst = rows.columns[0], rows.columns[1]
    return EdgeRows(src, dst, edge_list_weights(rows), None), all_integers(src, dst)


def text_ids(met: list[pa.Array], integers: list[bool]) -> pa.Array:
    """The distinct ids the ranges met (:func:`text_share`), int64 where every range's ids
    are integers (:func:`~.ids.infer_ids`)."""
    ids = pc.unique(pa.concat_arrays(list(met)))
    return ids.cast(pa.int64()) if all(integers) else ids


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


def numbered(rows: EdgeRows, edges_path: Path, offset: int, listed_in: Path, ids: pa.Array,
             relations: pa.Array | None, blocks: int) -> tuple[int, list[Piece]]:
    """A share's rows (the first row ``offset + 1`` of ``edges_path``) numbered by ``ids``
    (the graph's, in node order; an id not there is the error of one process's load, naming
    its row and ``listed_in``), its self-loops dropped and counted, cut into ``blocks``
    :class:`Piece` by source. The roles are every row's, self-loops included, as one
    process's (:func:`~.ids.relation_roles` over ``relations``)."""
    at = Rows(edges_path, [rows.src, rows.dst], offset=offset)
    src = codes_in(at, 0, ids, listed_in)
    dst = codes_in(at, 1, ids, listed_in)
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
