"""Reading tables: delimited text with its line numbers, Parquet files, part-file folders and
Delta tables, and the Parquet layout's node columns; every fault one :class:`InputError`
naming the file and the line or row."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch

from ..errors import InputError, one_line
from .ids import Rows, check_unique, first_unparsable, id_column

DELTA_LOG = "_delta_log"  # the transaction log folder that makes a folder a Delta Lake table
# A first data line whose first field is one of these is a header, not data.
HEADER_NAMES = frozenset({"src", "source", "source_id", "u", "head", "from", "id"})
# A first field like these (node1, user_a, uid_1, from_id) names a column where the line's
# fields recur nowhere below it: string ids can be spelled so too, but a node that is in one
# edge alone, the first, is what a header would be.
COLUMN_NAME = (r"(?i)^(src|source|from|head|node|user|uid|id|vertex|subject|start|left|u)"
               r"[ _.-]?(id|[0-9a-z])?$")


# Suffixes of the compressed text Arrow's input streams read (public graph collections
# such as SNAP ship their edge lists gzipped: facebook_combined.txt.gz).
COMPRESSED = frozenset({".gz", ".bz2", ".zst", ".lz4", ".br"})


def text_suffix(path: Path) -> str:
    """The suffix that tells a text file's kind, under a compression suffix: ``.tsv`` for
    ``edges.tsv.gz``."""
    suffix = path.suffix.lower()
    return Path(path.stem).suffix.lower() if suffix in COMPRESSED else suffix


def read_text(path: Path) -> str:
    """The text of ``path``, decompressed where its suffix names a compression."""
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a file")
    try:
        with pa.input_stream(str(path), compression="detect") as stream:
            data = stream.read()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except OSError as e:  # unreadable, or not the compression its suffix names
        raise InputError(f"{path}: cannot read ({e.strerror or one_line(e)})") from None
    return decoded(data, path)


def decoded(data: bytes, path: Path, first_line: int = 1) -> str:
    """``data``, bytes of ``path`` whose first line is line ``first_line``, as UTF-8 text (a
    byte order mark at the file's start dropped); an invalid byte is an error naming its
    line."""
    try:
        return data.decode("utf-8-sig" if first_line == 1 else "utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data[:e.start].count(b"\n")
        raise InputError(f"{path} line {line}: not UTF-8 text ({e.reason})") from None


def text_delimiter(path: Path) -> str | None:
    """``,`` for .csv, tab for .tsv, otherwise None (any run of whitespace)."""
    return {".csv": ",", ".tsv": "\t"}.get(text_suffix(path))


def read_text_rows(path: Path, ncols: tuple[int, ...], delim: str | None = None,
                   weight_header: bool = False) -> Rows:
    """Split a text table into string columns, skipping blank and ``#``/``%`` comment lines.

    ``delim`` defaults to the one of the extension (None: any run of whitespace). A first data
    line is a header (and skipped) if its first field is in :data:`HEADER_NAMES`, or, with
    ``weight_header``, if the file is .csv/.tsv and its third (weight) field is not a number.
    The splitting is vectorised in Arrow: Python's per-line ``split`` would dominate the time.
    """
    delim = text_delimiter(path) if delim is None else delim
    fields, line_numbers = text_fields(read_text(path), delim)
    if len(fields) and (starts_with_header(fields, weight_header and delim is not None)
                        or _names_columns(fields)):
        fields, line_numbers = fields[1:], line_numbers[1:]
    if not len(fields):
        raise InputError(no_data_lines(path))
    k = _column_count(path, pc.list_value_length(fields).to_numpy(), line_numbers, ncols)
    return fields_as_rows(path, fields, line_numbers, k, delim)


def no_data_lines(path: Path) -> str:
    """The error of a text file without a data line."""
    return f"{path}: no data lines (the file is empty or only comments)"


def text_fields(text: str, delim: str | None, first_line: int = 1
                ) -> tuple[pa.ListArray, np.ndarray]:
    """The fields of each data line of ``text`` (blank and ``#``/``%`` comment lines left
    out), split at ``delim`` (None: any run of whitespace), and each line's number, the
    first line of ``text`` being ``first_line``."""
    lines = pc.utf8_trim_whitespace(pc.list_flatten(pc.split_pattern(
        pa.array([text], pa.large_string()), "\n")))
    data = pc.and_(pc.greater(pc.utf8_length(lines), 0),
                   pc.invert(pc.match_substring_regex(lines, "^[#%]")))
    line_numbers = np.flatnonzero(data.to_numpy(zero_copy_only=False)) + first_line
    lines = lines.filter(data)
    fields = pc.utf8_split_whitespace(lines) if delim is None else pc.split_pattern(lines, delim)
    return fields, line_numbers


def starts_with_header(fields: pa.ListArray, weight_header: bool) -> bool:
    """Whether the first of these lines' ``fields`` names the columns (:func:`_is_header`)."""
    return _is_header(fields[0].as_py(), fields[1].as_py() if len(fields) > 1 else None,
                      weight_header)


def fields_as_rows(path: Path, fields: pa.ListArray, line_numbers: np.ndarray, k: int,
                   delim: str | None) -> Rows:
    """Lines of ``k`` ``fields`` each as ``k`` string columns, CSV quotes taken off where
    ``delim`` is set; an empty field is an error naming its line."""
    values = pc.list_flatten(fields).cast(pa.string())
    if delim is not None:  # CSV quoting: "a b" is the field a b
        values = pc.replace_substring_regex(pc.utf8_trim_whitespace(values), r'^"(.*)"$',
                                            r"\1")
    rows = Rows(path, [values.take(np.arange(j, len(values), k)) for j in range(k)],
                line_numbers)
    for j, column in enumerate(rows.columns):
        empty = np.flatnonzero(pc.equal(column, "").to_numpy(zero_copy_only=False))
        if len(empty):
            raise InputError(f"{rows.where(int(empty[0]))}: column {j + 1} is empty")
    return rows


def _is_header(first: list[str], second: list[str] | None, weight_header: bool) -> bool:
    """Whether the first data line names the columns: its first field is a usual name, or
    (``weight_header``) its weight is not a number, or no field of it is a number where
    every field of the next line is one (``node1,node2`` above integer ids, as pandas and
    spreadsheets write them)."""
    def numbers(line: list[str]) -> np.ndarray:
        values = pa.array([f.strip().strip('"') for f in line])
        return np.array([first_unparsable(values[i:i + 1], pa.float64()) is None
                         for i in range(len(values))])

    return first[0].strip().strip('"').lower() in HEADER_NAMES or (
        weight_header and len(first) == 3 and not numbers(first)[2]) or (
        second is not None and not numbers(first).any() and numbers(second).all())


def spelled_like_column(fields: pa.ListArray) -> bool:
    """Whether the first line's first field looks like a column name (:data:`COLUMN_NAME`)."""
    return bool(pc.match_substring_regex(_first_line(fields)[:1], COLUMN_NAME)[0].as_py())


def _names_columns(fields: pa.ListArray) -> bool:
    """Whether the first line's first field looks like a column name (:data:`COLUMN_NAME`)
    and none of its fields recurs in a later line: ``user_a,user_b`` above string ids."""
    if not spelled_like_column(fields):
        return False
    return not pc.any(pc.is_in(pc.list_flatten(fields[1:]),
                               value_set=_first_line(fields))).as_py()


def _first_line(fields: pa.ListArray) -> pa.Array:
    """The first line's fields, unquoted."""
    return pc.utf8_trim(fields[0].values.cast(pa.string()), characters=' "')


def _column_count(path: Path, counts: np.ndarray, lines: np.ndarray,
                  ncols: tuple[int, ...]) -> int:
    """The one column count all rows share; it must be one of ``ncols``."""
    expected = " or ".join(map(str, ncols))
    if counts[0] not in ncols:
        raise InputError(f"{path} line {lines[0]}: expected {expected} columns, "
                         f"got {counts[0]}")
    check_column_count(path, counts, lines, (int(counts[0]), int(lines[0])))
    return int(counts[0])


def check_column_count(path: Path, counts: np.ndarray, lines: np.ndarray,
                       like: tuple[int, int]) -> None:
    """Every row has the column count of the file's first data line, ``like`` (its count and
    line number); else the error names the first row that has not."""
    bad = np.flatnonzero(counts != like[0])
    if len(bad):
        i = int(bad[0])
        raise InputError(f"{path} line {lines[i]}: expected {like[0]} columns like line "
                         f"{like[1]}, got {counts[i]}")


def read_table(path: Path, ncols: int, what: str) -> Rows:
    """The first ``ncols`` columns of a Parquet file (``.parquet``) or of a text table.

    Errors are prefixed with ``what``, the role of the file (e.g. "seed pairs").
    """
    try:
        return _read_columns(path, ncols)
    except InputError as e:
        raise InputError(f"{what}: {e}") from None


def _read_columns(path: Path, ncols: int) -> Rows:
    if path.suffix.lower() != ".parquet" and not is_delta(path):
        return read_text_rows(path, ncols=(ncols,))
    file = parquet_dataset(path)
    names = file.schema.names
    if len(names) < ncols:
        raise InputError(f"{path}: expected at least {ncols} columns, got {len(names)}")
    with reading(path):
        table = file.to_table(columns=names[:ncols])
    if table.num_rows == 0:
        raise InputError(f"{path}: no rows")
    return Rows(path, [no_nulls(table.column(c).combine_chunks(), path, c, 0)
                       for c in names[:ncols]])


def parquet_dataset(path: Path) -> ds.Dataset:
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
        with reading(path):
            return ds.dataset(files, format="parquet", partitioning="hive",
                              partition_base_dir=str(path))
    elif path.is_dir():
        files = sorted(f for f in path.rglob("*") if f.is_file() and not any(
            part.startswith(("_", ".")) for part in f.relative_to(path).parts))
        if not files:
            raise InputError(f"{path}: a folder without Parquet part files")
    else:
        raise InputError(f"{path}: no such file")
    with reading(path):
        return ds.dataset([str(f) for f in files], format="parquet")


def is_delta(path: Path) -> bool:
    """Whether ``path`` is a Delta Lake table: a folder holding its transaction log."""
    return (path / DELTA_LOG).is_dir()


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """Arrow's errors on a damaged Parquet file (a corrupt page, a truncated footer) as one
    :class:`InputError` naming the file."""
    try:
        yield
    except (pa.ArrowException, OSError) as e:
        raise InputError(f"{path}: not a readable Parquet file ({one_line(e)})") from None


# Rows a streamed batch holds, and the bytes read from a file at a time. Reading 20,000 rows
# spread over a one-row-group file of 1M 128-wide vectors (489 MiB) peaked at 1.61 GiB through
# the dataset scanner (the column chunk pre-buffered whole), 0.90 GiB unbuffered, 0.41 GiB
# with these buffers.
STREAM_ROWS = 1 << 16
STREAM_BYTES = 1 << 22


def streamed_batches(path: Path, columns: list[str],
                     pieces: Iterable[tuple[str, int]] | None = None
                     ) -> Iterator[pa.RecordBatch]:
    """``columns`` of :func:`parquet_dataset` ``path``'s rows in file order, a batch of
    :data:`STREAM_ROWS` at a time, each file read :data:`STREAM_BYTES` at a time: never a
    whole column chunk in memory, however large the row groups. ``pieces``: only these
    ``(file, row group)`` (:func:`row_groups`), in their order. Arrow's allocator keeps
    what a batch freed unless told (``release_unused``, after each batch and when the reader
    stops early): the sample of vectors the automatic choices read from a 1M-node graph had
    left 140 MB more in the process."""
    data = parquet_dataset(path)
    wanted = [(name, None) for name in data.files] if pieces is None else \
        [(name, [group]) for name, group in pieces]
    try:
        for name, groups in wanted:
            with reading(path):
                file = pq.ParquetFile(data.filesystem.open_input_file(name), pre_buffer=False,
                                      buffer_size=STREAM_BYTES)
                batches = file.iter_batches(batch_size=STREAM_ROWS, row_groups=groups,
                                            columns=columns)
            while True:
                with reading(path):
                    batch = next(batches, None)
                if batch is None:
                    break
                yield batch
                pa.default_memory_pool().release_unused()
    finally:
        pa.default_memory_pool().release_unused()


def row_groups(path: Path) -> list[tuple[str, int, int]]:
    """Every row group of :func:`parquet_dataset` ``path``, in file order, as ``(file, row
    group, rows)``: read from the files' footers, not their rows."""
    data = parquet_dataset(path)
    out = []
    for name in data.files:
        with reading(path):
            meta = pq.ParquetFile(data.filesystem.open_input_file(name)).metadata
        out += [(name, g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)]
    return out


def edge_columns(present: list[str], path: Path, names: dict[str, str]) -> dict[str, str]:
    """The edge columns to read, the layout's name to the user's: source, target, and the
    weight and the relation where there."""
    missing = [names[c] for c in ("src", "dst") if names[c] not in present]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)}; "
                         f"has {', '.join(present)}")
    return {c: names[c] for c in ("src", "dst", "weight", "relation")
            if c in ("src", "dst") or names[c] in present}


def read_nodes(path: Path, names: dict[str, str], columns: list[str] | None = None
               ) -> pa.Table:
    """``nodes.parquet``, its columns given the layout's names, checked by :func:`node_table`;
    with ``columns`` (the layout's names) only those, where the file has them."""
    data = parquet_dataset(path)
    layout = {name: column for column, name in names.items()}
    if columns is not None:
        columns = [names[c] for c in columns if names[c] in data.schema.names]
    with reading(path):
        table = data.to_table(columns=columns)
    return node_table(table.rename_columns([layout.get(c, c) for c in table.column_names]),
                      path)


@dataclass(frozen=True)
class NodeContent:
    """The names and vectors of a Parquet layout's nodes, left in ``nodes.parquet``: a run
    on Ray has each part read its own nodes' rows on its workers, so that no process holds
    them all (a million 128-wide vectors: 0.5 GiB per graph, 1 GiB more while read whole).

    ``rows[i]`` is the file row of node number ``i``. Read rows are checked as a whole load
    checks them (:func:`node_names`, :func:`node_features`), each error naming the node."""

    path: Path
    columns: dict[str, str]  # the layout's "id", "name", "features" -> the user's column
    rows: np.ndarray
    width: int = 0  # the vectors' width (the first row's), 0 without vectors

    @property
    def has_names(self) -> bool:
        return "name" in self.columns

    @property
    def has_features(self) -> bool:
        return "features" in self.columns

    def names(self, nodes: np.ndarray) -> list[str]:
        """The names of node numbers ``nodes``, in their order."""
        return self.read(nodes, names=True, features=False)[0]

    def features(self, nodes: np.ndarray) -> torch.Tensor:
        """The ``[len(nodes), width]`` vectors of node numbers ``nodes``, in their order."""
        return self.read(nodes, names=False, features=True)[1]

    def read(self, nodes: np.ndarray, names: bool = True, features: bool = True
             ) -> tuple[list[str] | None, torch.Tensor | None]:
        """The names and the ``[len(nodes), width]`` vectors of node numbers ``nodes``, in
        their order (``None`` where not asked for or not held), in one pass over the file,
        filled a batch of it at a time (a copy of the part's rows at most, not three: a
        million rows read by two parts had peaked at 1.8 GiB more)."""
        named = np.empty(len(nodes), dtype=object) if names and self.has_names else None
        vectors = torch.empty(len(nodes), self.width) if features and self.has_features else None
        columns = [c for c, x in (("name", named), ("features", vectors)) if x is not None]
        for at, table in self._read(nodes, columns) if columns else []:
            if named is not None:
                named[at] = node_names(table, self.path)
            if vectors is not None:
                x = node_features(table, self.path)
                if x.size(1) != self.width:
                    raise InputError(f"{self.path}: node {table.column('id')[0].as_py()!r} has "
                                     f"{x.size(1)} features, the first node of the file "
                                     f"{self.width}")
                vectors[torch.from_numpy(at)] = x
        return None if named is None else named.tolist(), vectors

    def _read(self, nodes: np.ndarray, columns: list[str]
              ) -> Iterator[tuple[np.ndarray, pa.Table]]:
        """Per batch of the file holding some of ``nodes``' rows: their positions in
        ``nodes`` and their ``id`` and ``columns``, streamed (:func:`streamed_batches`)."""
        wanted = self.rows[np.asarray(nodes, dtype=np.int64)]
        order = np.argsort(wanted, kind="stable")
        wanted = wanted[order]
        offset = done = 0
        read = [self.columns[c] for c in ("id", *columns)]
        for batch in streamed_batches(self.path, read) if wanted.size else []:
            lo, done = np.searchsorted(wanted, [offset, offset + batch.num_rows])
            if done > lo:
                table = pa.Table.from_batches([batch.take(pa.array(wanted[lo:done] - offset))])
                yield order[lo:done], table.rename_columns(["id", *columns])
            offset += batch.num_rows
            if done == wanted.size:  # the rest of the file holds none of them
                break
        if done < wanted.size:  # those rows would be left as they were allocated
            raise InputError(f"{self.path}: {offset} rows, fewer than when the job read its "
                             f"ids ({int(wanted[-1]) + 1} at least): was it changed while the "
                             "job ran?")


def node_content(path: Path, names: dict[str, str], num_nodes: int) -> NodeContent | None:
    """The :class:`NodeContent` of ``nodes.parquet`` (``None`` without names or vectors):
    the column types checked now, the values when each part reads them."""
    data = parquet_dataset(path)
    schema = data.schema
    columns = {c: names[c] for c in ("name", "features") if names[c] in schema.names}
    if not columns:
        return None
    columns["id"] = names["id"]
    if "name" in columns:
        _check_names_type(schema.field(columns["name"]).type, path)
    width = 0
    if "features" in columns:
        kind = schema.field(columns["features"]).type
        _check_features_type(kind, path)
        if pa.types.is_fixed_size_list(kind):
            width = kind.list_size
        else:  # the first row's, streamed (the dataset's head reads a whole row group)
            first = next(streamed_batches(path, [columns["features"]]), None)
            width = (int(pc.list_value_length(first.column(0))[0].as_py() or 0)
                     if first is not None and first.num_rows else 0)
    return NodeContent(path, columns, np.arange(num_nodes, dtype=np.int64), width)


def _check_names_type(t: pa.DataType, path: Path) -> None:
    if not (pa.types.is_string(t) or pa.types.is_large_string(t)):
        raise InputError(f"{path}: column name has type {t}, expected string")


def _check_features_type(t: pa.DataType, path: Path) -> None:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)) \
            or not (pa.types.is_floating(t.value_type) or pa.types.is_integer(t.value_type)):
        raise InputError(f"{path}: column features has type {t}, expected a list of numbers")


def node_table(table: pa.Table, path: Path) -> pa.Table:
    """``table`` with a distinct, non-null ``id`` column normalised to int64/string."""
    if "id" not in table.column_names:
        raise InputError(f"{path}: missing column id; has {', '.join(table.column_names)}")
    rows = Rows(path, [no_nulls(table.column("id").combine_chunks(), path, "id", 0)])
    ids = id_column(rows, 0, "id")
    check_unique(rows, ids, "nodes", "lists node")
    return table.set_column(table.column_names.index("id"), "id", ids)


def node_names(nodes: pa.Table, path: Path) -> list[str] | None:
    if "name" not in nodes.column_names:
        return None
    names = nodes.column("name").combine_chunks()
    _check_names_type(names.type, path)
    _no_nulls_by_id(names, nodes, path, "name")
    return names.to_pylist()


def node_features(nodes: pa.Table, path: Path) -> torch.Tensor | None:
    """The ``features`` list column as a float32 ``[N, d]`` tensor; every row finite, same d."""
    if "features" not in nodes.column_names:
        return None
    features = nodes.column("features").combine_chunks()
    _check_features_type(features.type, path)
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


def no_nulls(column: pa.Array, path: Path, name: str, offset: int) -> pa.Array:
    nulls = np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))
    if len(nulls):
        raise InputError(f"{path} row {offset + int(nulls[0]) + 1}: column {name} is null")
    return column
