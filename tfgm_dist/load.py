"""Stage 1, load: every input format to the same canonical :class:`Graph`.

Formats: plain edge lists, knowledge-graph triples, LEDA ``.gw``, a Parquet directory layout,
and Arrow tables with its columns (the DBP15k importer of the benchmarks, ``jobs/dbp15k.py``,
is built on them). The user's ids (ints or strings) are kept beside contiguous node numbers;
self-loops and duplicate edges are dropped and counted in ``Graph.stats``. Every
malformed input raises :class:`InputError` with one line naming the file and the line (text),
row (Parquet) or id at fault.
"""
from __future__ import annotations

import stat
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import torch

from tfgm_dist.config import column_names
from tfgm_dist.errors import InputError, one_line
from tfgm_dist.graph import Graph

FORMATS = ("edgelist", "triples", "gw", "parquet")
EDGE_LIST_SUFFIXES = frozenset({"", ".tsv", ".csv", ".txt", ".edges", ".edgelist", ".el"})
DELTA_LOG = "_delta_log"  # the transaction log folder that makes a folder a Delta Lake table
# A first data line whose first field is one of these is a header, not data.
HEADER_NAMES = frozenset({"src", "source", "source_id", "u", "head", "from", "id"})
# Canonical decimal integers only, so that an integer id prints back exactly as it was read.
_INT_PATTERN = r"^-?(0|[1-9][0-9]*)$"


@dataclass(frozen=True)
class _Rows:
    """Columns read from one file, and where each row came from (for error messages)."""

    path: Path
    columns: list[pa.Array]
    lines: np.ndarray | None = None  # 1-based text line of each row; None for Parquet
    offset: int = 0  # Parquet: number of rows before this batch

    def position(self, i: int) -> str:
        return f"line {self.lines[i]}" if self.lines is not None else f"row {self.offset + i + 1}"

    def where(self, i: int) -> str:
        return f"{self.path} {self.position(i)}"


# ---------------------------------------------------------------------------------------------
# Public API


def fetch(uri: str, folder: str | Path) -> Path:
    """A local path for an input given as a path or a pyarrow filesystem URI.

    Remote files and folders (``s3://``, ``gs://``, ``hdfs://`` ...) are copied into
    ``folder`` first, so that every loader reads local files and names them in errors. A
    local input must be a regular file or a folder: a pipe or a device (``/dev/zero``) is
    refused, as it can be endless and cannot be read again for the fingerprint.
    """
    if "://" not in uri or uri.startswith("file://"):
        local = Path(uri.removeprefix("file://"))
        try:
            mode = local.stat().st_mode
        except FileNotFoundError:
            raise InputError(f"{local}: no such file or folder") from None
        except OSError as e:
            raise InputError(f"{local}: cannot read ({e.strerror})") from None
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise InputError(f"{local}: not a regular file or folder (a pipe or device "
                             "cannot be read)")
        return local
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise InputError(f"{uri}: no such file or folder")
        local = Path(folder) / f"{len(list(Path(folder).iterdir()))}-{info.base_name}"
        pafs.copy_files(path, str(local), source_filesystem=fs,
                        destination_filesystem=pafs.LocalFileSystem())
    except (OSError, pa.ArrowException) as e:
        raise InputError(f"{uri}: cannot read ({one_line(e)})") from None
    return local


def load_graph(path: str | Path, fmt: str | None = None, columns: str = "") -> Graph:
    """Load a graph file or Parquet directory, choosing the format from ``fmt`` or the path.

    A directory is the Parquet layout, ``.gw`` is LEDA, ``triples*``/``.triples`` are
    knowledge-graph triples, and the usual edge-list extensions (or none) are edge lists.
    ``columns`` names the Parquet layout's columns where they differ from its own
    (:func:`~tfgm_dist.config.column_names`); text formats are read by position.
    """
    path = Path(path)
    fmt = _guess_format(path) if fmt is None else fmt
    if fmt == "parquet":
        return _load_parquet_dir(path, column_names(columns))
    loaders = {"edgelist": _load_edge_list, "triples": _load_triples, "gw": _load_leda}
    if fmt not in loaders:
        raise InputError(f"{path}: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if columns:
        raise InputError(f"{path}: column names apply to the Parquet layout; a {fmt} file is "
                         "read by position")
    return loaders[fmt](path)


def graph_from_tables(edges: pa.Table, nodes: pa.Table | None = None, *,
                      name: str = "<table>") -> Graph:
    """A graph from Arrow tables with the columns of the Parquet layout (``edges``: ``src``,
    ``dst``, optional ``weight``; ``nodes``: ``id``, optional ``name`` or ``features``),
    checked as files are; ``name`` stands for the tables in error messages."""
    edges_at, nodes_at = Path(f"{name} edges"), Path(f"{name} nodes")
    checked = None if nodes is None else _node_table(nodes, nodes_at)
    columns = _edge_columns(edges.column_names, edges_at, column_names(""))
    return _layout_graph(edges.select(columns).to_batches(), columns, edges_at, checked,
                         nodes_at, name)


def pairs_from_table(table: pa.Table, source: Graph, target: Graph,
                     what: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load_pairs` for an Arrow table: its first two columns, in the user's ids."""
    if table.num_columns < 2:
        raise InputError(f"{what}: expected two columns (source id, target id), got "
                         f"{table.num_columns}")
    rows = _Rows(Path(f"<{what}>"), [_no_nulls(table.column(j).combine_chunks(),
                                              Path(f"<{what}>"), table.column_names[j], 0)
                                     for j in range(2)])
    return _node_numbers(rows, 0, source, what), _node_numbers(rows, 1, target, what)


def load_pairs(path: str | Path, source: Graph, target: Graph,
               what: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one-to-one (source id, target id) pairs and return them as node numbers.

    The file is two-column text (tab, comma or whitespace separated) or Parquet (its first two
    columns), in the user's ids. ``what`` (e.g. ``"seed pairs"``) prefixes every error message.
    """
    rows = _read_table(Path(path), ncols=2, what=what)
    return _node_numbers(rows, 0, source, what), _node_numbers(rows, 1, target, what)


def load_id_list(path: str | Path, graph: Graph, what: str) -> np.ndarray:
    """Read a one-column list of distinct user ids of ``graph`` and return their node numbers.

    Used to restrict the candidate targets or the query sources of a run.
    """
    rows = _read_table(Path(path), ncols=1, what=what)
    return _node_numbers(rows, 0, graph, what)


def load_labels(path: str | Path, graph: Graph) -> list[str]:
    """The label of every node of ``graph`` (supervised collections): the ``label`` column of
    a Parquet-layout folder's ``nodes.parquet``, or a two-column (node id, label) file.
    Every node needs one label, and labels are unique within a graph."""
    path = Path(path)
    if path.is_dir():
        return _parquet_labels(path / "nodes.parquet")
    return _file_labels(path, graph)


# ---------------------------------------------------------------------------------------------
# Formats


def _guess_format(path: Path) -> str:
    suffix = path.suffix.lower()
    if path.is_dir():
        return "parquet"
    if suffix == ".gw":
        return "gw"
    if suffix == ".triples" or path.name.lower().startswith("triples"):
        return "triples"
    if suffix in EDGE_LIST_SUFFIXES:
        return "edgelist"
    raise InputError(f"{path}: cannot tell the format from the extension {suffix!r}; "
                     f"pass fmt= one of {', '.join(FORMATS)}")


def _load_edge_list(path: Path) -> Graph:
    """``u v`` or ``u v weight`` lines; integer ids if every id is an integer, else strings."""
    rows = _read_text_rows(path, ncols=(2, 3), weight_header=True)
    src, dst = _infer_ids(rows.columns[0], rows.columns[1])
    ids, s, d = _factorize(src, dst)
    weight = _weights(rows.columns[2], rows) if len(rows.columns) == 3 else None
    return _graph(ids, s, d, str(path), weight=weight)


def _load_triples(path: Path) -> Graph:
    """``head relation tail`` lines; the relation is dropped, its distinct values counted."""
    rows = _read_text_rows(path, ncols=(3,))
    src, dst = _infer_ids(rows.columns[0], rows.columns[2])
    ids, s, d = _factorize(src, dst)
    return _graph(ids, s, d, str(path),
                  stats={"relations": pc.count_distinct(rows.columns[1]).as_py()})


def _load_leda(path: Path) -> Graph:
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
    return _graph(ids, ends[:, 0] - 1, ends[:, 1] - 1, str(path))


def _load_parquet_dir(path: Path, names: dict[str, str]) -> Graph:
    """``edges.parquet`` (``src``, ``dst``, optional ``weight``), optional ``nodes.parquet``.

    With ``nodes.parquet`` its row order is the node order and every edge endpoint must be
    listed there; without it nodes are numbered in order of first appearance. Edges are read
    one row group at a time so that large files stream. Either may be a folder of part files,
    as Spark and Hive write them, or a Delta table (:func:`_parquet`); ``path`` itself may be
    a Delta table of edges. ``names`` maps the layout's column names to the user's
    (:func:`~tfgm_dist.config.column_names`).
    """
    if not path.is_dir():
        raise InputError(f"{path}: the Parquet layout is a directory holding edges.parquet")
    nodes_path = path / "nodes.parquet"
    nodes = _read_nodes(nodes_path, names) if nodes_path.exists() else None
    edges_path = path if is_delta(path) else path / "edges.parquet"  # a Delta table of edges
    edges = _parquet(edges_path)
    columns = _edge_columns(edges.schema.names, edges_path, names)
    return _layout_graph(_batches(edges, edges_path, columns), columns, edges_path, nodes,
                         nodes_path, str(path))


def _layout_graph(batches: Iterable[pa.RecordBatch], columns: list[str], edges_path: Path,
                  nodes: pa.Table | None, nodes_path: Path, source: str) -> Graph:
    """The graph of the Parquet layout's edge batches and checked node table."""
    node_ids = None if nodes is None else nodes.column("id").combine_chunks()
    src_parts, dst_parts, weight_parts, offset = [], [], [], 0
    for batch in batches:
        rows = _Rows(edges_path, [_no_nulls(batch.column(c), edges_path, c, offset)
                                  for c in columns], offset=offset)
        src_parts.append(_id_column(rows, 0, "src"))
        dst_parts.append(_id_column(rows, 1, "dst"))
        if len(columns) == 3:
            weight_parts.append(_weights(rows.columns[2], rows))
        offset += batch.num_rows
    if offset == 0:
        raise InputError(f"{edges_path}: no edges")
    weight = np.concatenate(weight_parts) if weight_parts else None
    src, dst = pa.concat_arrays(src_parts), pa.concat_arrays(dst_parts)
    if node_ids is None:
        if src.type != dst.type:
            raise InputError(f"{edges_path}: src ids are {src.type} but dst ids are {dst.type}")
        ids, s, d = _factorize(src, dst)
        return _graph(ids, s, d, source, weight=weight)
    # one lookup table for the whole file: building it per batch was most of a 1M-node load
    rows = _Rows(edges_path, [src, dst])
    return _graph(node_ids, _codes_in(rows, 0, node_ids, nodes_path),
                  _codes_in(rows, 1, node_ids, nodes_path), source, weight=weight,
                  names=_node_names(nodes, nodes_path), features=_node_features(nodes, nodes_path))


def _file_labels(path: Path, graph: Graph) -> list[str]:
    """Labels of every node of ``graph`` from a two-column (node id, label) file."""
    what = "labels"
    rows = _read_table(path, ncols=2, what=what)
    nodes = _node_numbers(rows, 0, graph, what)
    values = rows.columns[1].cast(pa.string())
    _check_unique(rows, values, what, "uses label")
    if nodes.size < graph.num_nodes:
        listed = np.zeros(graph.num_nodes, dtype=bool)
        listed[nodes] = True
        missing = graph.ids[int(np.flatnonzero(~listed)[0])].as_py()
        raise InputError(f"{what}: {path}: node {missing!r} of {graph.source} has no label "
                         "(every node of a collection graph needs one)")
    out = np.empty(graph.num_nodes, dtype=object)
    out[nodes] = values.to_pylist()
    return out.tolist()


def _parquet_labels(path: Path) -> list[str]:
    """The ``label`` column of a Parquet-layout ``nodes.parquet`` (rows = node order)."""
    if not path.exists():
        raise InputError(f"{path}: no such file; a collection graph in the Parquet layout "
                         "lists its nodes with a label column")
    file = _parquet(path)
    names = file.schema.names
    if "label" not in names:
        raise InputError(f"{path}: missing column label; has {', '.join(names)}")
    with _reading(path):
        column = file.to_table(columns=["label"]).column("label").combine_chunks()
    values = _no_nulls(column, path, "label", 0)
    values = values.cast(pa.string())
    _check_unique(_Rows(path, [values]), values, "labels", "uses label")
    return values.to_pylist()


# ---------------------------------------------------------------------------------------------
# Reading text and Parquet


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InputError(f"{path} line {line}: not UTF-8 text ({e.reason})") from None


def _delimiter(path: Path) -> str | None:
    """``,`` for .csv, tab for .tsv, otherwise None (any run of whitespace)."""
    return {".csv": ",", ".tsv": "\t"}.get(path.suffix.lower())


def _read_text_rows(path: Path, ncols: tuple[int, ...], delim: str | None = None,
                    weight_header: bool = False) -> _Rows:
    """Split a text table into string columns, skipping blank and ``#``/``%`` comment lines.

    ``delim`` defaults to the one of the extension (None: any run of whitespace). A first data
    line is a header (and skipped) if its first field is in :data:`HEADER_NAMES`, or, with
    ``weight_header``, if the file is .csv/.tsv and its third (weight) field is not a number.
    The splitting is vectorised in Arrow: Python's per-line ``split`` would dominate the time.
    """
    delim = _delimiter(path) if delim is None else delim
    text = pa.array([_read_text(path)], pa.large_string())
    lines = pc.utf8_trim_whitespace(pc.list_flatten(pc.split_pattern(text, "\n")))
    data = pc.and_(pc.greater(pc.utf8_length(lines), 0),
                   pc.invert(pc.match_substring_regex(lines, "^[#%]")))
    line_numbers = np.flatnonzero(data.to_numpy(zero_copy_only=False)) + 1
    lines = lines.filter(data)
    fields = (pc.utf8_split_whitespace(lines) if delim is None
              else pc.split_pattern(lines, delim))
    if len(fields) and _is_header(fields[0].as_py(), weight_header and delim is not None):
        fields, line_numbers = fields[1:], line_numbers[1:]
    if not len(fields):
        raise InputError(f"{path}: no data lines (the file is empty or only comments)")
    k = _column_count(path, pc.list_value_length(fields).to_numpy(), line_numbers, ncols)
    values = pc.list_flatten(fields).cast(pa.string())
    if delim is not None:  # CSV quoting: "a b" is the field a b
        values = pc.replace_substring_regex(pc.utf8_trim_whitespace(values), r'^"(.*)"$',
                                            r"\1")
    rows = _Rows(path, [values.take(np.arange(j, len(values), k)) for j in range(k)],
                 line_numbers)
    for j, column in enumerate(rows.columns):
        empty = np.flatnonzero(pc.equal(column, "").to_numpy(zero_copy_only=False))
        if len(empty):
            raise InputError(f"{rows.where(int(empty[0]))}: column {j + 1} is empty")
    return rows


def _is_header(first: list[str], weight_header: bool) -> bool:
    return first[0].strip().strip('"').lower() in HEADER_NAMES or (
        weight_header and len(first) == 3
        and _first_unparsable(pa.array([first[2].strip()]), pa.float64()) is not None)


def _column_count(path: Path, counts: np.ndarray, lines: np.ndarray,
                  ncols: tuple[int, ...]) -> int:
    """The one column count all rows share; it must be one of ``ncols``."""
    expected = " or ".join(map(str, ncols))
    if counts[0] not in ncols:
        raise InputError(f"{path} line {lines[0]}: expected {expected} columns, "
                         f"got {counts[0]}")
    bad = np.flatnonzero(counts != counts[0])
    if len(bad):
        i = int(bad[0])
        raise InputError(f"{path} line {lines[i]}: expected {counts[0]} columns like line "
                         f"{lines[0]}, got {counts[i]}")
    return int(counts[0])


def _read_table(path: Path, ncols: int, what: str) -> _Rows:
    """The first ``ncols`` columns of a Parquet file (``.parquet``) or of a text table.

    Errors are prefixed with ``what``, the role of the file (e.g. "seed pairs").
    """
    try:
        return _read_columns(path, ncols)
    except InputError as e:
        raise InputError(f"{what}: {e}") from None


def _read_columns(path: Path, ncols: int) -> _Rows:
    if path.suffix.lower() != ".parquet" and not is_delta(path):
        return _read_text_rows(path, ncols=(ncols,))
    file = _parquet(path)
    names = file.schema.names
    if len(names) < ncols:
        raise InputError(f"{path}: expected at least {ncols} columns, got {len(names)}")
    with _reading(path):
        table = file.to_table(columns=names[:ncols])
    if table.num_rows == 0:
        raise InputError(f"{path}: no rows")
    return _Rows(path, [_no_nulls(table.column(c).combine_chunks(), path, c, 0)
                        for c in names[:ncols]])


def _parquet(path: Path) -> ds.Dataset:
    """A Parquet file, a folder of part files (``part-*.parquet``, any depth, as Spark and
    Hive write them; names starting with ``_`` or ``.``, such as ``_SUCCESS``, are not data),
    or a Delta Lake table (a folder with ``_delta_log``: the files of its current version,
    hive-style partition columns included). The parts are read in the sorted order of their
    paths: a folder listing has no order of its own, and the node order of ``nodes.parquet``
    must not depend on it."""
    if path.is_file():
        files = [path]
    elif is_delta(path):
        from deltalake import DeltaTable
        from deltalake.exceptions import DeltaError
        try:
            files = sorted(DeltaTable(str(path)).file_uris())
        except (DeltaError, OSError) as e:
            raise InputError(f"{path}: not a readable Delta table ({one_line(e)})") from None
        if not files:
            raise InputError(f"{path}: a Delta table without rows")
        with _reading(path):
            return ds.dataset(files, format="parquet", partitioning="hive",
                              partition_base_dir=str(path))
    elif path.is_dir():
        files = sorted(f for f in path.rglob("*") if f.is_file() and not any(
            part.startswith(("_", ".")) for part in f.relative_to(path).parts))
        if not files:
            raise InputError(f"{path}: a folder without Parquet part files")
    else:
        raise InputError(f"{path}: no such file")
    with _reading(path):
        return ds.dataset([str(f) for f in files], format="parquet")


def is_delta(path: Path) -> bool:
    """Whether ``path`` is a Delta Lake table: a folder holding its transaction log."""
    return (path / DELTA_LOG).is_dir()


@contextmanager
def _reading(path: Path) -> Iterator[None]:
    """Arrow's errors on a damaged Parquet file (a corrupt page, a truncated footer) as one
    :class:`InputError` naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a readable Parquet file ({one_line(e)})") from None


def _batches(data: ds.Dataset, path: Path, columns: list[str]) -> Iterator[pa.RecordBatch]:
    """``data``'s record batches in file order, a row group's worth at a time, read under
    :func:`_reading`."""
    batches = iter(data.to_batches(columns=columns))
    while True:
        with _reading(path):
            batch = next(batches, None)
        if batch is None:
            return
        yield batch


def _edge_columns(present: list[str], path: Path, names: dict[str, str]) -> list[str]:
    """The user's names of the edge columns to read: source, target and weight if there."""
    wanted = [names["src"], names["dst"]]
    missing = [c for c in wanted if c not in present]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; "
                         f"has {', '.join(present)}")
    return wanted + ([names["weight"]] if names["weight"] in present else [])


def _read_nodes(path: Path, names: dict[str, str]) -> pa.Table:
    """``nodes.parquet``, its columns given the layout's names, checked by :func:`_node_table`."""
    with _reading(path):
        table = _parquet(path).to_table()
    layout = {name: column for column, name in names.items()}
    return _node_table(table.rename_columns([layout.get(c, c) for c in table.column_names]),
                       path)


def _node_table(table: pa.Table, path: Path) -> pa.Table:
    """``table`` with a distinct, non-null ``id`` column normalised to int64/string."""
    if "id" not in table.column_names:
        raise InputError(f"{path}: missing column id; has {', '.join(table.column_names)}")
    rows = _Rows(path, [_no_nulls(table.column("id").combine_chunks(), path, "id", 0)])
    ids = _id_column(rows, 0, "id")
    _check_unique(rows, ids, "nodes", "lists node")
    return table.set_column(table.column_names.index("id"), "id", ids)


def _node_names(nodes: pa.Table, path: Path) -> list[str] | None:
    if "name" not in nodes.column_names:
        return None
    names = nodes.column("name").combine_chunks()
    if not (pa.types.is_string(names.type) or pa.types.is_large_string(names.type)):
        raise InputError(f"{path}: column name has type {names.type}, expected string")
    _no_nulls_by_id(names, nodes, path, "name")
    return names.to_pylist()


def _node_features(nodes: pa.Table, path: Path) -> torch.Tensor | None:
    """The ``features`` list column as a float32 ``[N, d]`` tensor; every row finite, same d."""
    if "features" not in nodes.column_names:
        return None
    features = nodes.column("features").combine_chunks()
    if not (pa.types.is_list(features.type) or pa.types.is_large_list(features.type)
            or pa.types.is_fixed_size_list(features.type)) \
            or not (pa.types.is_floating(features.type.value_type)
                    or pa.types.is_integer(features.type.value_type)):
        raise InputError(f"{path}: column features has type {features.type}, "
                         f"expected a list of numbers")
    _no_nulls_by_id(features, nodes, path, "features")
    widths = pc.list_value_length(features).to_numpy(zero_copy_only=False)
    bad = np.flatnonzero(widths != widths[0]) if len(widths) else []
    if len(bad):
        raise InputError(f"{path}: node {_node_id(nodes, bad[0])!r} has {widths[bad[0]]} "
                         f"features, node {_node_id(nodes, 0)!r} has {widths[0]}")
    values = pc.list_flatten(features).cast(pa.float32()).to_numpy(zero_copy_only=False)
    matrix = values.reshape(len(widths), int(widths[0]) if len(widths) else 0)
    bad = np.flatnonzero(~np.isfinite(matrix).all(axis=1))
    if len(bad):
        raise InputError(f"{path}: node {_node_id(nodes, bad[0])!r} has a NaN, infinite or "
                         f"missing feature")
    return torch.tensor(matrix)


def _node_id(nodes: pa.Table, i: int) -> int | str:
    return nodes.column("id")[int(i)].as_py()


def _no_nulls_by_id(column: pa.Array, nodes: pa.Table, path: Path, name: str) -> None:
    nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
    if len(nulls):
        raise InputError(f"{path}: node {_node_id(nodes, nulls[0])!r} has no {name}")


def _no_nulls(column: pa.Array, path: Path, name: str, offset: int) -> pa.Array:
    nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
    if len(nulls):
        raise InputError(f"{path} row {offset + int(nulls[0]) + 1}: column {name} is null")
    return column


# ---------------------------------------------------------------------------------------------
# LEDA


def _leda_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Numbered non-blank, non-comment lines of a LEDA file."""
    return ((no, s) for no, s in enumerate(map(str.strip, _read_text(path).split("\n")), 1)
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


# ---------------------------------------------------------------------------------------------
# Ids, weights, numbering


def _first_unparsable(values: pa.Array, to: pa.DataType) -> int | None:
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
    return int(bad[0]) if len(bad) else _first_unparsable(values, pa.int64())


def _infer_ids(src: pa.Array, dst: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Text id columns as int64 if every id in both is an integer, else as strings."""
    if _first_non_int(src) is None and _first_non_int(dst) is None:
        return src.cast(pa.int64()), dst.cast(pa.int64())
    return src, dst


def _id_column(rows: _Rows, j: int, name: str) -> pa.Array:
    """A typed (Parquet) id column normalised to int64 or string."""
    column = rows.columns[j]
    if pa.types.is_integer(column.type):
        return column.cast(pa.int64())
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return column.cast(pa.string())
    raise InputError(f"{rows.path}: column {name} has type {column.type}; "
                     f"ids must be integers or strings")


def _ids_as(rows: _Rows, j: int, to: pa.DataType, what: str) -> pa.Array:
    """Column ``j`` as ids of type ``to`` (int64 or string), naming the line of a bad id."""
    column = rows.columns[j]
    if pa.types.is_string(column.type) and pa.types.is_integer(to):
        bad = _first_non_int(column)
        if bad is not None:
            raise InputError(f"{what}: {rows.where(bad)}: id {column[bad].as_py()!r} is not "
                             f"an integer, and the ids are integers")
        return column.cast(to)
    typed = _id_column(rows, j, f"{j + 1}")
    if typed.type != to:
        typed = typed.cast(to)  # int -> string: a string-id graph read back from Parquet ints
    return typed


def _node_numbers(rows: _Rows, j: int, graph: Graph, what: str) -> np.ndarray:
    """Column ``j`` of distinct user ids as node numbers of ``graph``, naming any bad line."""
    ids = _ids_as(rows, j, graph.ids.type, what)
    numbers = graph.index_of(ids, what, rows.where)
    _check_unique(rows, ids, what, "maps node")
    return numbers


def _check_unique(rows: _Rows, ids: pa.Array, what: str, verb: str) -> None:
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


def _codes_in(rows: _Rows, j: int, node_ids: pa.Array, listed_in: Path) -> np.ndarray:
    """Node numbers of id column ``j`` against a given node list; unlisted ids are errors."""
    ids = _ids_as(rows, j, node_ids.type, "edges")
    positions = pc.index_in(ids, value_set=node_ids)
    if positions.null_count:
        i = int(np.flatnonzero(positions.is_null().to_numpy(zero_copy_only=False))[0])
        raise InputError(f"{rows.where(i)}: id {ids[i].as_py()!r} is not listed in {listed_in}")
    return positions.to_numpy(zero_copy_only=False).astype(np.int64)


def _weights(column: pa.Array, rows: _Rows) -> np.ndarray:
    """A weight column as finite float32 numbers."""
    if not (pa.types.is_string(column.type) or pa.types.is_integer(column.type)
            or pa.types.is_floating(column.type)):
        raise InputError(f"{rows.path}: column weight has type {column.type}, expected numbers")
    bad = _first_unparsable(column, pa.float64())
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


def _factorize(src: pa.Array, dst: pa.Array) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    """Number nodes ``0..N-1`` in order of first appearance, reading each edge src then dst."""
    e = len(src)
    interleaved = np.arange(2 * e).reshape(2, e).T.ravel()
    encoded = pc.dictionary_encode(pa.concat_arrays([src, dst]).take(interleaved))
    codes = encoded.indices.to_numpy().astype(np.int64).reshape(e, 2)
    return encoded.dictionary, codes[:, 0].copy(), codes[:, 1].copy()


def _graph(ids: pa.Array, src: np.ndarray, dst: np.ndarray, source: str, *,
           weight: np.ndarray | None = None, names: list[str] | None = None,
           features: torch.Tensor | None = None, stats: dict[str, int] | None = None) -> Graph:
    """The canonical Graph, without self-loops and repeated (src, dst) edges, which it counts.

    Of repeated edges the first is kept, with its weight; direction is kept as given.
    """
    loops = src == dst
    candidates = np.flatnonzero(~loops)
    if len(src) and not len(candidates):
        raise InputError(f"{source}: every edge is a self-loop; a graph needs edges between "
                         "distinct nodes")
    keys = src[candidates] * len(ids) + dst[candidates]
    _, first = np.unique(keys, return_index=True)
    kept = candidates[np.sort(first)]
    return Graph(
        ids=ids,
        edge_index=torch.from_numpy(np.stack([src[kept], dst[kept]])),
        edge_weight=None if weight is None else torch.from_numpy(weight[kept]),
        names=names,
        features=features,
        source=source,
        stats={"input_edges": len(src), "self_loops": int(loops.sum()),
               "duplicate_edges": len(candidates) - len(first), **(stats or {})},
    )
