"""Stage 1, load: every input format to the same canonical :class:`Graph`.

This module holds the public loaders; the formats are in :mod:`.formats`, the reading of
text, Parquet and Delta tables in :mod:`.tables`, ids, weights and numbering in :mod:`.ids`,
remote inputs in :mod:`.remote`, a Parquet layout read in shares by several workers (a run
on Ray) in :mod:`.shares`.

Formats: plain edge lists, knowledge-graph triples, LEDA ``.gw``, a Parquet directory layout,
and Arrow tables with its columns (the DBP15k importer of the benchmarks, ``jobs/dbp15k.py``,
is built on them). The user's ids (ints or strings) are kept beside contiguous node numbers;
self-loops and duplicate edges are dropped and counted in ``Graph.stats``; nodes without names
whose ids are URIs are named by their local names (:func:`.ids.uri_names`). Every
malformed input raises :class:`InputError` with one line naming the file and the line (text),
row (Parquet) or id at fault.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..config import column_names
from ..errors import InputError
from ..graph import Graph
from .formats import (FORMATS, file_labels, guess_format, layout_graph, load_edge_list, load_leda,
                      load_parquet_dir, load_triples, parquet_labels)
from .ids import Rows, node_numbers
from .remote import fetch
from .tables import DELTA_LOG, edge_columns, is_delta, no_nulls, node_table, read_table

__all__ = ["DELTA_LOG", "fetch", "graph_from_tables", "is_delta", "load_graph", "load_id_list",
           "load_labels", "load_pairs", "pairs_from_table"]


def load_graph(path: str | Path, fmt: str | None = None, columns: str = "",
               deferred: bool = False) -> Graph:
    """Load a graph file or Parquet directory, choosing the format from ``fmt`` or the path.

    A directory is the Parquet layout, ``.gw`` is LEDA, a name holding ``triples`` is
    knowledge-graph triples, and the usual edge-list extensions (or none) are edge lists.
    ``columns`` names the Parquet layout's columns where they differ from its own
    (:func:`~tfgm_dist.config.column_names`); text formats are read by position.
    ``deferred`` leaves the Parquet layout's node names and vectors in ``nodes.parquet``
    (:attr:`Graph.content`) for the parts of a run on Ray to read.
    """
    path = Path(path)
    fmt = guess_format(path) if fmt is None else fmt
    loaders = {"edgelist": load_edge_list, "triples": load_triples, "gw": load_leda,
               "parquet": lambda at: load_parquet_dir(at, column_names(columns), deferred)}
    if fmt not in loaders:
        raise InputError(f"{path}: unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if columns and fmt != "parquet":
        raise InputError(f"{path}: column names apply to the Parquet layout; a {fmt} file is "
                         "read by position")
    try:
        return loaders[fmt](path)
    finally:
        # Arrow's allocator keeps what the numbering's whole-column kernels freed: a 1M-node
        # graph's load left 312 MB in the process (the ids it holds are 10 MB)
        pa.default_memory_pool().release_unused()


def graph_from_tables(edges: pa.Table, nodes: pa.Table | None = None, *,
                      name: str = "<table>") -> Graph:
    """A graph from Arrow tables with the columns of the Parquet layout (``edges``: ``src``,
    ``dst``, optional ``weight`` and ``relation``; ``nodes``: ``id``, optional ``name`` or
    ``features``), checked as files are; ``name`` stands for the tables in error messages."""
    edges_at, nodes_at = Path(f"{name} edges"), Path(f"{name} nodes")
    checked = None if nodes is None else node_table(nodes, nodes_at)
    columns = edge_columns(edges.column_names, edges_at, column_names(""))
    return layout_graph(edges.select(list(columns.values())).to_batches(), columns, edges_at,
                        checked, nodes_at, name)


def pairs_from_table(table: pa.Table, source: Graph, target: Graph,
                     what: str) -> tuple[np.ndarray, np.ndarray]:
    """:func:`load_pairs` for an Arrow table: its first two columns, in the user's ids."""
    if table.num_columns < 2:
        raise InputError(f"{what}: expected two columns (source id, target id), got "
                         f"{table.num_columns}")
    rows = Rows(Path(f"<{what}>"), [no_nulls(table.column(j).combine_chunks(),
                                             Path(f"<{what}>"), table.column_names[j], 0)
                                    for j in range(2)])
    return node_numbers(rows, 0, source, what), node_numbers(rows, 1, target, what)


def load_pairs(path: str | Path, source: Graph, target: Graph,
               what: str) -> tuple[np.ndarray, np.ndarray]:
    """Read one-to-one (source id, target id) pairs and return them as node numbers.

    The file is two-column text (tab, comma or whitespace separated) or Parquet (its first two
    columns), in the user's ids. ``what`` (e.g. ``"seed pairs"``) prefixes every error message.
    """
    rows = past_a_header(read_table(Path(path), ncols=2, what=what), source, target)
    return node_numbers(rows, 0, source, what), node_numbers(rows, 1, target, what)


def load_id_list(path: str | Path, graph: Graph, what: str) -> np.ndarray:
    """Read a one-column list of distinct user ids of ``graph`` and return their node numbers.

    Used to restrict the candidate targets or the query sources of a run.
    """
    rows = past_a_header(read_table(Path(path), ncols=1, what=what), graph)
    return node_numbers(rows, 0, graph, what)


def past_a_header(rows: Rows, *graphs: Graph) -> Rows:
    """``rows`` of a text file of ids (column ``j`` those of ``graphs[j]``) without its first
    line where that names the columns: none of its ids is a node, and each of the next
    line's is. Where ids are strings (``flickr,lastfm`` above ``a3930,b12843``) a header
    looks like data to :func:`~.tables.read_text_rows`, which skips only usual names."""
    if rows.lines is None or len(rows.columns[0]) < 2:
        return rows

    def nodes(i: int) -> list[bool]:
        return [graph.has_id(column[i].as_py()) for column, graph in zip(rows.columns, graphs)]

    if any(nodes(0)) or not all(nodes(1)):
        return rows
    return Rows(rows.path, [column[1:] for column in rows.columns], rows.lines[1:])


def load_labels(path: str | Path, graph: Graph) -> list[str]:
    """The label of every node of ``graph`` (supervised collections): the ``label`` column of
    a Parquet-layout folder's ``nodes.parquet``, or a two-column (node id, label) file.
    Every node needs one label, and labels are unique within a graph."""
    path = Path(path)
    if path.is_dir():
        return parquet_labels(path / "nodes.parquet")
    return file_labels(path, graph)
