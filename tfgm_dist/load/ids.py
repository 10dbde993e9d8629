"""Ids, weights and numbering: the user's ids (ints or strings) parsed and checked, node
numbers assigned, self-loops and duplicate edges dropped and counted."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch

from ..errors import InputError
from ..graph import Graph

if TYPE_CHECKING:  # tables imports this module
    from .tables import NodeContent


@dataclass(frozen=True)
class Rows:
    """Columns read from one file, and where each row came from (for error messages)."""

    path: Path
    columns: list[pa.Array]
    lines: np.ndarray | None = None  # 1-based text line of each row; None for Parquet
    offset: int = 0  # Parquet: number of rows before this batch

    def position(self, i: int) -> str:
        return f"line {self.lines[i]}" if self.lines is not None else f"row {self.offset + i + 1}"

    def where(self, i: int) -> str:
        return f"{self.path} {self.position(i)}"


# Canonical decimal integers only, so that an integer id prints back exactly as it was read.
_INT_PATTERN = r"^-?(0|[1-9][0-9]*)$"


def first_unparsable(values: pa.Array, to: pa.DataType) -> int | None:
    """Index of the first value that does not cast to ``to``, None if all do.

    Arrow only says that a cast failed, not where; bisecting on the prefix finds it with
    O(log n) vectorised casts.
    """
    def fails(prefix: pa.Array) -> bool:
        try:
            pc.cast(prefix, to)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True
        return False

    if not fails(values):
        return None
    good, bad = 0, len(values)  # values[:good] casts, values[:bad] does not
    while bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (good, mid) if fails(values[:mid]) else (mid, bad)
    return bad - 1


def _first_non_int(values: pa.Array) -> int | None:
    """Index of the first string that is not a canonical decimal int64, None if none."""
    ok = pc.match_substring_regex(values, _INT_PATTERN).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(~ok)
    return int(bad[0]) if len(bad) else first_unparsable(values, pa.int64())


def infer_ids(src: pa.Array, dst: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Text id columns as int64 if every id in both is an integer, else as strings."""
    if all_integers(src, dst):
        return src.cast(pa.int64()), dst.cast(pa.int64())
    return src, dst


def all_integers(*columns: pa.Array) -> bool:
    """Whether every id of these text columns is a canonical decimal int64."""
    return all(_first_non_int(c) is None for c in columns)


def id_column(rows: Rows, j: int, name: str) -> pa.Array:
    """A typed (Parquet) id column normalised to int64 or string."""
    column = rows.columns[j]
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.string())
    raise InputError(f"{rows.path}: column {name} has type {column.type}; "
                     f"ids must be integers or strings")


def _ids_as(rows: Rows, j: int, to: pa.DataType, what: str) -> pa.Array:
    """Column ``j`` as ids of type ``to`` (int64 or string), naming the line of a bad id."""
    column = rows.columns[j]
    if pa.types.is_string(column.type) and pa.types.is_integer(to):
        bad = _first_non_int(column)
        if bad is not None:
            raise InputError(f"{what}: {rows.where(bad)}: id {column[bad].as_py()!r} is not "
                             f"an integer, and the ids are integers")
        return column.cast(to)
    typed = id_column(rows, j, f"{j + 1}")
    if typed.type != to:
        typed = typed.cast(to)  # int -> string: a string-id graph read back from Parquet ints
    return typed


def node_numbers(rows: Rows, j: int, graph: Graph, what: str) -> np.ndarray:
    """Column ``j`` of distinct user ids as node numbers of ``graph``, naming any bad line."""
    ids = _ids_as(rows, j, graph.ids.type, what)
    numbers = graph.index_of(ids, what, rows.where)
    check_unique(rows, ids, what, "maps node")
    return numbers


def check_unique(rows: Rows, ids: pa.Array, what: str, verb: str) -> None:
    """Raise on the first row whose id repeats the id of an earlier row."""
    numbers = pc.dictionary_encode(ids).indices.to_numpy()
    _, first = np.unique(numbers, return_index=True)
    if len(first) == len(numbers):
        return
    repeated = np.ones(len(numbers), dtype=bool)
    repeated[first] = False
    i = int(np.flatnonzero(repeated)[0])
    earlier = int(np.flatnonzero(numbers[:i] == numbers[i])[0])
    raise InputError(f"{what}: {rows.where(i)}: {verb} {ids[i].as_py()!r} twice "
                     f"(also at {rows.position(earlier)})")


def codes_in(rows: Rows, j: int, node_ids: pa.Array, listed_in: Path) -> np.ndarray:
    """Node numbers of id column ``j`` against a given node list; unlisted ids are errors."""
    ids = _ids_as(rows, j, node_ids.type, "edges")
    positions = pc.index_in(ids, value_set=node_ids)
    if positions.null_count:
        i = int(np.flatnonzero(positions.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{rows.where(i)}: id {ids[i].as_py()!r} is not listed in {listed_in}")
    return positions.to_numpy(zero_copy_only=False).astype(np.int64)


def weights_of(column: pa.Array, rows: Rows) -> np.ndarray:
    """A weight column as finite float32 numbers."""
    if not (pa.types.is_string(column.type) or pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)):
        raise InputError(f"{rows.path}: column weight has type {column.type}, expected numbers")
    bad = first_unparsable(column, pa.float64())
    if bad is not None:
        raise InputError(f"{rows.where(bad)}: weight {column[bad].as_py()!r} is not a number")
    with np.errstate(over="ignore"):
        weights = column.cast(pa.float64()).to_numpy(zero_copy_only=False).astype(np.float32)
    bad_rows = np.flatnonzero(~np.isfinite(weights))
    if len(bad_rows):
        i = int(bad_rows[0])
        raise InputError(f"{rows.where(i)}: weight {column[i].as_py()!r} is not a finite "
                         f"float32 number")
    negative = np.flatnonzero(weights < 0)
    if len(negative):  # the gcn operator's D^-1/2 of a negative degree is NaN
        i = int(negative[0])
        raise InputError(f"{rows.where(i)}: weight {column[i].as_py()!r} is negative (edge "
                         "weights must be >= 0)")
    return weights


def factorize(src: pa.Array, dst: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Number nodes ``0..N-1`` in order of first appearance, reading each edge src then dst."""
    e = len(src)
    interleaved = np.arange(2 * e).reshape(2, e).T.ravel()
    encoded = pc.dictionary_encode(pa.concat_arrays([src, dst]).take(interleaved))
    codes = encoded.indices.to_numpy().astype(np.int64).reshape(e, 2)
    return encoded.dictionary, codes[:, 0].copy(), codes[:, 1].copy()


def relation_values(relations: pa.Array) -> pa.Array:
    """The distinct values of a relation column, sorted: relation ``r`` is the ``r``-th."""
    values = pc.unique(relations)
    return values.take(pc.sort_indices(values))


def relation_roles(relations: pa.Array, src: np.ndarray, dst: np.ndarray,
                   values: pa.Array | None = None) -> np.ndarray:
    """The ``[2, M]`` ``(node, role)`` pairs of triples ``(src, relation, dst)``, each once:
    the ``r``-th relation of ``values`` (default: :func:`relation_values` of ``relations``;
    a graph read in shares gives every share all of them) gives role ``2r`` to its heads and
    ``2r + 1`` to its tails (so the order of a file's lines changes nothing)."""
    values = relation_values(relations) if values is None else values
    code = pc.index_in(relations, values).to_numpy().astype(np.int64)
    pairs = np.concatenate([np.stack([src, 2 * code]), np.stack([dst, 2 * code + 1])], axis=1)
    return np.unique(pairs, axis=1)


# A URI: a scheme and "://" (N-Triples' angle brackets allowed). A local name that is a number,
# or one letter and a number (Wikidata's Q42), names nothing.
_URI = r"^<?[A-Za-z][A-Za-z0-9+.\-]*://"
_CODE = r"^[A-Za-z]?[0-9]+$"


def uri_names(uris: pa.Array) -> list[str] | None:
    """The local names of ``uris`` as node names, when every one is a URI and most of them
    are words: ``http://dbpedia.org/resource/Kyoto_Station`` names ``Kyoto Station`` (the
    text after the last ``/`` or ``#``, percent-decoded, ``_`` read as a space). ``None``
    otherwise, and when more than half the local names are numbers or codes such as
    Wikidata's ``Q42``."""
    if not len(uris) or not (pa.types.is_string(uris.type) or pa.types.is_large_string(uris.type)):
        return None
    if not pc.all(pc.match_substring_regex(uris, _URI)).as_py():
        return None
    local = pc.replace_substring_regex(pc.utf8_rtrim(uris, characters=">/"), r"^.*[/#]", "")
    if pc.mean(pc.match_substring_regex(local, _CODE).cast(pa.int8())).as_py() > 0.5:
        return None
    return [unquote(x).replace("_", " ") for x in local.to_pylist()]


def first_of_each(src: np.ndarray, dst: np.ndarray, num_nodes: int) -> np.ndarray:
    """The positions of the first of each distinct ``(src, dst)`` edge, increasing."""
    _, first = np.unique(src * num_nodes + dst, return_index=True)
    return np.sort(first)


def only_self_loops(source: str) -> InputError:
    """The error of a graph file whose every edge is a self-loop."""
    return InputError(f"{source}: every edge is a self-loop; a graph needs edges between "
                      "distinct nodes")


def build_graph(ids: pa.Array, src: np.ndarray, dst: np.ndarray, source: str, *,
                weight: np.ndarray | None = None, names: list[str] | None = None,
                features: torch.Tensor | None = None, stats: dict[str, int] | None = None,
                uris: pa.Array | None = None, content: NodeContent | None = None,
                roles: np.ndarray | None = None) -> Graph:
    """The canonical Graph, without self-loops and repeated (src, dst) edges, which it counts.

    Of repeated edges the first is kept, with its weight; direction is kept as given;
    ``roles`` (:func:`relation_roles`) are kept whole. Without
    ``names``, the nodes are named by the local names of their URIs (:func:`uri_names`):
    ``uris``, one per node, where the ids are not URIs themselves, else the ids.
    """
    loops = src == dst
    candidates = np.flatnonzero(~loops)
    if len(src) and not len(candidates):
        raise only_self_loops(source)
    kept = candidates[first_of_each(src[candidates], dst[candidates], len(ids))]
    from_ids = names is None and features is None and content is None
    if from_ids:
        names = uri_names(ids if uris is None else uris)
        from_ids = names is not None
    return Graph(
        ids=ids,
        edge_index=torch.from_numpy(np.stack([src[kept], dst[kept]])),
        edge_weight=None if weight is None else torch.from_numpy(weight[kept]),
        names=names,
        features=features,
        source=source,
        names_from_ids=from_ids,
        content=content,
        roles=None if roles is None else torch.from_numpy(roles),
        stats={"input_edges": len(src), "self_loops": int(loops.sum()),
               "duplicate_edges": len(candidates) - len(kept), **(stats or {})},
    )
