"""The Python API: :func:`align` two graphs in this process and get the matches back.

The same job as ``tfgm-dist align`` (the automatic choices, the held-out estimate, the
confidence per match), without an output folder::

    import tfgm_dist
    result = tfgm_dist.align("source/", "target/", seeds="seeds.tsv")
    result.matches          # pyarrow.Table: source_id, target_id, rank, score, confidence
    result.metrics          # dict: the metrics.json of a run (auto, estimate, seconds, ...)

Graphs are paths (any format ``tfgm-dist`` reads) or edge tables: a ``pyarrow.Table``, a
pandas or a polars DataFrame with ``src`` and ``dst`` columns (optional ``weight``), or an
``(edges, nodes)`` pair whose nodes table has ``id`` and ``name`` or ``features``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Union

import pyarrow as pa

from . import auto, write
from .config import Config, load_config, with_overrides
from .errors import InputError
from .graph import Graph
from .load import graph_from_tables, load_graph, load_pairs, pairs_from_table
from .pipeline import load_pair
from .stopwatch import Stopwatch, peak_rss_bytes

GraphInput = Union[str, Path, Graph, Any]  # a path, a Graph, an Arrow/pandas/polars table


@dataclass(frozen=True)
class Alignment:
    """What :func:`align` found: the match table and the run's metrics."""

    matches: pa.Table
    metrics: dict[str, Any]


def align(source: GraphInput, target: GraphInput, *, seeds: Any = None,
          config: str | Path | Config | None = None, **settings: Any) -> Alignment:
    """Align ``source`` with ``target`` (see the module docstring for what each may be).

    ``seeds``: known pairs, a file or a two-column table (source id, target id).
    ``config``: a TOML/YAML file or a :class:`Config`. ``settings`` override it, by section
    (``assign={"method": "argmax"}``, ``search={"k": 20}``) or at the top level
    (``top_k=5``, ``seed=1``); what is left unset is chosen from the input, as with no config
    file. Bad input raises :class:`~tfgm_dist.errors.InputError` naming what is wrong.
    """
    cfg = config if isinstance(config, Config) else (
        load_config(config) if config is not None else Config())
    cfg = with_overrides(cfg, **_dotted(settings))
    watch, start = Stopwatch(), time.perf_counter()
    with watch.stage("load"):
        pair = load_pair(_graph(source, "source"), _graph(target, "target"), cfg)
        if seeds is not None:
            pair = replace(pair, seeds=_pairs(seeds, pair.source, pair.target))
    result = auto.align(pair, cfg, watch)
    matches = write.match_table(pair, result, cfg.top_k, cfg.assign.min_confidence)
    metrics = {**result.metrics, "seconds": {**watch.seconds,
                                             "total": time.perf_counter() - start},
               "peak_rss_bytes": peak_rss_bytes()}
    return Alignment(matches, metrics)


def _dotted(settings: dict[str, Any]) -> dict[str, Any]:
    """``{"assign": {"method": "argmax"}, "top_k": 5}`` as
    ``{"assign.method": "argmax", "top_k": 5}``."""
    out: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def _table(x: Any) -> pa.Table | None:
    """``x`` as an Arrow table when it is one, or a pandas or polars DataFrame."""
    if isinstance(x, pa.Table):
        return x
    if hasattr(x, "to_arrow"):  # polars
        return x.to_arrow()
    if type(x).__module__.startswith("pandas"):
        return pa.Table.from_pandas(x, preserve_index=False)
    return None


def _graph(x: GraphInput, name: str) -> Graph:
    if isinstance(x, Graph):
        return x
    if isinstance(x, (str, Path)):
        return load_graph(x)
    if isinstance(x, tuple) and len(x) == 2:
        edges, nodes = (_table(t) for t in x)
        if edges is not None and nodes is not None:
            return graph_from_tables(edges, nodes, name=name)
    edges = _table(x)
    if edges is None:
        raise InputError(f"{name}: expected a path, an edge table (pyarrow, pandas, polars) or "
                         f"an (edges, nodes) pair of tables, got {type(x).__name__}")
    return graph_from_tables(edges, name=name)


def _pairs(seeds: Any, source: Graph, target: Graph):
    table = _table(seeds)
    if table is not None:
        return pairs_from_table(table, source, target, "seeds")
    return load_pairs(seeds, source, target, "seeds")
