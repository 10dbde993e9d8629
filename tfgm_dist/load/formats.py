"""The graph formats: edge lists, knowledge-graph triples, LEDA ``.gw`` and the Parquet
layout (``edges.parquet``, ``nodes.parquet``), each read into a :class:`Graph`."""
from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..graph import Graph
from .ids import (Rows, build_graph, check_unique, codes_in, factorize, id_column, infer_ids,
                  node_numbers, relation_roles, weights_of)
from .tables import (COMPRESSED, NodeContent, edge_columns, is_delta, no_nulls, node_content,
                     node_features, node_names, parquet_dataset, read_nodes, read_table,
                     read_text, read_text_rows, reading, streamed_batches, text_suffix)

log = logging.getLogger(__name__)

FORMATS = ("edgelist", "triples", "gw", "parquet")
EDGE_LIST_SUFFIXES = frozenset({"", ".tsv", ".csv", ".txt", ".edges", ".edgelist", ".el"})


def guess_format(path: Path) -> str:
    suffix = text_suffix(path)
    if path.is_dir() or suffix == ".parquet":
        return "parquet"
    if suffix == ".gw":
        return "gw"
    if suffix == ".triples" or "triples" in path.name.lower():  # OpenEA: rel_triples_1
        return "triples"
    if suffix in EDGE_LIST_SUFFIXES:
        return "edgelist"
    raise InputError(f"{path}: cannot tell the format from the extension {suffix!r}; "
                     f"name it (--format, or fmt= in Python): one of {', '.join(FORMATS)}")


def load_edge_list(path: Path) -> Graph:
    """``u v`` or ``u v weight`` lines; integer ids if every id is an integer, else strings."""
    rows = read_text_rows(path, ncols=(2, 3), weight_header=True)
    src, dst = infer_ids(rows.columns[0], rows.columns[1])
    ids, s, d = factorize(src, dst)
    return build_graph(ids, s, d, str(path), weight=edge_list_weights(rows))


def edge_list_weights(rows: Rows) -> np.ndarray | None:
    """The third column of an edge list's ``rows`` as weights (:func:`~.ids.weights_of`),
    ``None`` where there is none."""
    try:
        return weights_of(rows.columns[2], rows) if len(rows.columns) == 3 else None
    except InputError as e:
        raise InputError(f"{e} (if its lines are a knowledge graph's head relation tail, "
                         "pass --format triples)") from None


def load_triples(path: Path) -> Graph:
    """``head relation tail`` lines: the edges ``head -> tail``, and the relations as roles
    that the nodes play (:func:`~.ids.relation_roles`), their distinct values counted.

    Entities named by URIs are named by their local names (:func:`~.ids.uri_names`); so are
    the integer ids of a JAPE-layout file (DBP15k, DWY100k): ``triples_1`` whose
    ``ent_ids_1`` beside it lists ``id URI`` lines."""
    rows = read_text_rows(path, ncols=(3,))
    src, dst = infer_ids(rows.columns[0], rows.columns[2])
    ids, s, d = factorize(src, dst)
    return build_graph(ids, s, d, str(path), uris=_entity_uris(path, ids),
                       roles=relation_roles(rows.columns[1], s, d),
                       stats={"relations": pc.count_distinct(rows.columns[1]).as_py()})


def _entity_uris(path: Path, ids: pa.Array) -> pa.Array | None:
    """The URI of every node of a JAPE-layout triples file, from its ``ent_ids_N``; ``None``
    where there is none, or it does not list every node (then a warning says why)."""
    packed = path.suffix if path.suffix.lower() in COMPRESSED else ""  # triples_1.gz
    found = re.fullmatch(r".*triples_(\d+)", path.name[:len(path.name) - len(packed)])
    if found is None or not pa.types.is_integer(ids.type):
        return None
    listings = [path.with_name(f"ent_ids_{found.group(1)}{suffix}") for suffix in ("", packed)]
    listing = next((at for at in listings if at.is_file()), None)
    if listing is None:
        return None
    try:
        rows = read_text_rows(listing, ncols=(2,))
    except InputError as e:
        log.warning("names not read from %s: %s", listing, e)
        return None
    at = pc.index_in(ids.cast(pa.string()), value_set=rows.columns[0])
    missing = np.flatnonzero(at.is_null().to_numpy(zero_copy_only=False))
    if missing.size:
        log.warning("names not read from %s: it does not list entity %s of %s", listing,
                    ids[int(missing[0])].as_py(), path)
        return None
    return rows.columns[1].take(at)


def load_leda(path: Path) -> Graph:
    """LEDA ``.gw``: node labels ``|{name}|`` are the ids; edges ``u v rev |{label}|``, 1-based.

    A file whose node labels are all empty uses the 1-based LEDA node index as the id.
    """
    lines = _leda_lines(path)
    _leda_next(lines, path, "the header LEDA.GRAPH", lambda s: s == "LEDA.GRAPH")
    _leda_next(lines, path, "the node type")
    _leda_next(lines, path, "the edge type")
    no, s = _leda_next(lines, path, "the direction or the node count")
    if s in ("-1", "-2"):
        no, s = _leda_next(lines, path, "the node count")
    n = _leda_count(path, no, s, "node count")
    labels = [_leda_next(lines, path, "a node label |{...}|", _is_leda_label) for _ in range(n)]
    ids = _leda_ids(path, labels)
    no, s = _leda_next(lines, path, "the edge count")
    m = _leda_count(path, no, s, "edge count")
    ends = np.array([_leda_edge(path, *_leda_next(lines, path, f"{m} edges"), n)
                     for _ in range(m)], dtype=np.int64).reshape(m, 2)
    extra = next(lines, None)
    if extra is not None:
        raise InputError(f"{path} line {extra[0]}: more lines than the {m} edges declared "
                         f"on line {no}")
    if m == 0:
        raise InputError(f"{path}: no edges")
    return build_graph(ids, ends[:, 0] - 1, ends[:, 1] - 1, str(path))


def load_parquet_dir(path: Path, names: dict[str, str], deferred: bool = False) -> Graph:
    """``edges.parquet`` (``src``, ``dst``, optional ``weight`` and ``relation``), optional
    ``nodes.parquet``.

    With ``nodes.parquet`` its row order is the node order and every edge endpoint must be
    listed there; without it nodes are numbered in order of first appearance. Edges are read
    a batch at a time (:func:`streamed_batches`), so that large files stream. Either may be
    a folder of part files, as Spark and Hive write them, or a Delta table
    (:func:`parquet_dataset`); ``path`` itself may be a Delta table of edges, or a
    ``.parquet`` file or folder of part files of them. ``names`` maps the layout's column
    names to the user's (:func:`~tfgm_dist.config.column_names`). ``deferred``: the nodes'
    names and vectors are left in the file (:attr:`Graph.content`), their types checked,
    for the parts of a run to read.
    """
    files = layout_files(path, names, deferred)
    return layout_graph(streamed_batches(files.edges_path, list(files.columns.values())),
                        files.columns, files.edges_path, files.nodes, files.nodes_path,
                        str(path), files.content)


@dataclass(frozen=True)
class LayoutFiles:
    """A Parquet layout's files before its edges are read: where they are, the edge columns
    (:func:`~.tables.edge_columns`), the checked node table (``None`` without
    ``nodes.parquet``; ids only where its names and vectors are left in ``content``)."""

    edges_path: Path
    columns: dict[str, str]
    nodes: pa.Table | None
    nodes_path: Path
    content: NodeContent | None


def layout_files(path: Path, names: dict[str, str], deferred: bool) -> LayoutFiles:
    """The :class:`LayoutFiles` of the layout at ``path`` (:func:`load_parquet_dir`)."""
    edges_only = path.suffix.lower() == ".parquet" and not (path / "edges.parquet").exists()
    if not path.is_dir() and not edges_only:
        raise InputError(f"{path}: the Parquet layout is a directory holding edges.parquet, "
                         "or a .parquet file of edges")
    nodes_path = path / "nodes.parquet"
    nodes = (read_nodes(nodes_path, names, ["id"] if deferred else None)
             if not edges_only and nodes_path.exists() else None)
    # the file itself, or a Delta table of edges
    edges_path = path if edges_only or is_delta(path) else path / "edges.parquet"
    columns = edge_columns(parquet_dataset(edges_path).schema.names, edges_path, names)
    content = (node_content(nodes_path, names, nodes.num_rows)
               if deferred and nodes is not None else None)
    return LayoutFiles(edges_path, columns, nodes, nodes_path, content)


@dataclass(frozen=True)
class EdgeRows:
    """The Parquet layout's edge columns of some of its rows, checked: the ids (int64 or
    string) at each end, the weights and the relations where the layout has them."""

    src: pa.Array
    dst: pa.Array
    weight: np.ndarray | None
    relations: pa.Array | None

    @property
    def num_rows(self) -> int:
        return len(self.src)


def edge_rows(batches: Iterable[pa.RecordBatch], columns: dict[str, str], edges_path: Path,
              offset: int = 0) -> EdgeRows:
    """The :class:`EdgeRows` of ``batches`` (``columns``: :func:`~.tables.edge_columns`, in
    its order), the first of them row ``offset + 1`` of ``edges_path`` (errors name it); an
    empty file or share is an error."""
    at = {c: i for i, c in enumerate(columns)}
    start = offset
    src_parts, dst_parts, weight_parts, relation_parts = [], [], [], []
    for batch in batches:
        rows = Rows(edges_path, [no_nulls(batch.column(c), edges_path, c, offset)
                                 for c in columns.values()], offset=offset)
        src_parts.append(id_column(rows, 0, "src"))
        dst_parts.append(id_column(rows, 1, "dst"))
        if "weight" in at:
            weight_parts.append(weights_of(rows.columns[at["weight"]], rows))
        if "relation" in at:
            relation_parts.append(rows.columns[at["relation"]])
        offset += batch.num_rows
    if offset == start:
        raise InputError(f"{edges_path}: no edges")
    return EdgeRows(pa.concat_arrays(src_parts), pa.concat_arrays(dst_parts),
                    np.concatenate(weight_parts) if weight_parts else None,
                    pa.concat_arrays(relation_parts) if relation_parts else None)


def layout_graph(batches: Iterable[pa.RecordBatch], columns: dict[str, str], edges_path: Path,
                 nodes: pa.Table | None, nodes_path: Path, source: str,
                 content: NodeContent | None = None) -> Graph:
    """The graph of the Parquet layout's edge batches (``columns``:
    :func:`~.tables.edge_columns`, in its order) and checked node table, its names and
    vectors read from the table or left in ``content``; a ``relation`` column gives the
    nodes roles, as triples do (:func:`~.ids.relation_roles`)."""
    node_ids = None if nodes is None else nodes.column("id").combine_chunks()
    edges = edge_rows(batches, columns, edges_path)
    weight, relations = edges.weight, edges.relations
    # the batches' ids dropped as soon as they are one column, the columns as soon as they
    # are numbers: a 1M-node graph's load peaked 0.12 GiB higher holding them to the end
    src, dst = edges.src, edges.dst
    del edges
    if node_ids is None:
        if src.type != dst.type:
            raise InputError(f"{edges_path}: src ids are {src.type} but dst ids are {dst.type}")
        ids, s, d = factorize(src, dst)
        del src, dst
        return build_graph(ids, s, d, source, weight=weight, roles=_roles(relations, s, d))
    # one lookup table for the whole file: building it per batch was most of a 1M-node load
    rows = Rows(edges_path, [src, dst])
    del src, dst
    s = codes_in(rows, 0, node_ids, nodes_path)
    d = codes_in(rows, 1, node_ids, nodes_path)
    del rows
    return build_graph(node_ids, s, d, source, weight=weight, roles=_roles(relations, s, d),
                       names=None if content else node_names(nodes, nodes_path),
                       features=None if content else node_features(nodes, nodes_path),
                       content=content)


def _roles(relations: pa.Array | None, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    return None if relations is None else relation_roles(relations, src, dst)


def file_labels(path: Path, graph: Graph) -> list[str]:
    """Labels of every node of ``graph`` from a two-column (node id, label) file."""
    what = "labels"
    rows = read_table(path, ncols=2, what=what)
    nodes = node_numbers(rows, 0, graph, what)
    values = rows.columns[1].cast(pa.string())
    check_unique(rows, values, what, "uses label")
    if nodes.size < graph.num_nodes:
        listed = np.zeros(graph.num_nodes, dtype=bool)
        listed[nodes] = True
        missing = graph.ids[int(np.flatnonzero(~listed)[0])].as_py()
        raise InputError(f"{what}: {path}: node {missing!r} of {graph.source} has no label "
                         "(every node of a collection graph needs one)")
    out = np.empty(graph.num_nodes, dtype=object)
    out[nodes] = values.to_pylist()
    return out.tolist()


def parquet_labels(path: Path) -> list[str]:
    """The ``label`` column of a Parquet-layout ``nodes.parquet`` (rows = node order)."""
    if not path.exists():
        raise InputError(f"{path}: no such file; a collection graph in the Parquet layout "
                         "lists its nodes with a label column")
    file = parquet_dataset(path)
    names = file.schema.names
    if "label" not in names:
        raise InputError(f"{path}: missing column label; has {', '.join(names)}")
    with reading(path):
        column = file.to_table(columns=["label"]).column("label").combine_chunks()
    values = no_nulls(column, path, "label", 0)
    values = values.cast(pa.string())
    check_unique(Rows(path, [values]), values, "labels", "uses label")
    return values.to_pylist()


def _leda_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered non-blank, non-comment lines of a LEDA file."""
    return ((no, s) for no, s in enumerate(map(str.strip, read_text(path).split("\n")), 1)
            if s and not s.startswith("#"))


def _leda_next(lines: Iterator[tuple[int, str]], path: Path, expected: str,
               ok: Callable[[str], bool] = lambda s: True) -> tuple[int, str]:
    entry = next(lines, None)
    if entry is None:
        raise InputError(f"{path}: file ends early, expected {expected}")
    if not ok(entry[1]):
        raise InputError(f"{path} line {entry[0]}: expected {expected}, got {entry[1]!r:.60}")
    return entry


def _is_leda_label(s: str) -> bool:
    return s.startswith("|{") and s.endswith("}|")


def _leda_count(path: Path, no: int, s: str, what: str) -> int:
    if not s.isdecimal():
        raise InputError(f"{path} line {no}: expected the {what}, got {s!r:.60}")
    return int(s)


def _leda_ids(path: Path, labels: list[tuple[int, str]]) -> pa.Array:
    names = [s[2:-2] for _, s in labels]
    if not any(names):
        return pa.array(np.arange(1, len(names) + 1, dtype=np.int64))
    seen: dict[str, int] = {}
    for no, name in zip((no for no, _ in labels), names):
        if name in seen or not name:
            raise InputError(f"{path} line {no}: node label {name!r} is empty or repeats "
                             f"line {seen.get(name, no)}; labels are the node ids")
        seen[name] = no
    return pa.array(names, pa.string())


def _leda_edge(path: Path, no: int, s: str, n: int) -> tuple[int, int]:
    fields = s.split(maxsplit=3)
    if len(fields) < 3 or not all(f.isdecimal() for f in fields[:2]):
        raise InputError(f"{path} line {no}: expected an edge 'source target reversal "
                         f"|{{label}}|', got {s!r:.60}")
    u, v = int(fields[0]), int(fields[1])
    if not (1 <= u <= n and 1 <= v <= n):
        raise InputError(f"{path} line {no}: edge {u} {v} names a node outside 1..{n}")
    return u, v
