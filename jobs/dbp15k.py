"""The DBP15k benchmark importer: one pair folder as two graphs with names and the gold pairs.

Used by the benchmarks and the tests; a user's KGs come in through ``tfgm-dist align`` (the
``triples`` format, or the Parquet layout with a ``name`` column). Built on the library's
public loaders (:func:`tfgm_dist.load.graph_from_tables`, :func:`tfgm_dist.load.load_pairs`),
which check the files as they check a user's.
"""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv

from tfgm_dist.errors import InputError
from tfgm_dist.graph import Graph
from tfgm_dist.load import graph_from_tables, load_pairs


def load_dbp15k(pair_dir: str | Path,
                names_json: str | Path | None = None) -> tuple[Graph, Graph, pa.Table]:
    """Import one DBP15k pair directory: source graph, target graph and the gold pairs.

    User ids are the integer entity ids of ``ent_ids_*`` (one integer space shared by both
    KGs), nodes are in ``ent_ids_*`` order, and ``names`` are the machine-translated tokens of
    ``names_json`` (default ``<pair_dir>/../translated_names/dbp_<pair>.json``) joined by
    spaces, else the last segment of the entity's URI. The table has columns ``source_id``,
    ``target_id`` in ``ref_ent_ids`` file order.
    """
    pair_dir = Path(pair_dir)
    if not pair_dir.is_dir():
        raise InputError(f"{pair_dir}: not a DBP15k pair directory")
    if names_json is None:
        names_json = pair_dir.parent / "translated_names" / f"dbp_{pair_dir.name}.json"
    names = _read_names(Path(names_json))
    source, target = (_kg(pair_dir, k, names) for k in "12")
    s, t = load_pairs(pair_dir / "ref_ent_ids", source, target, "DBP15k reference pairs")
    return source, target, pa.table({"source_id": source.ids.take(s),
                                     "target_id": target.ids.take(t)})


def triples(pair_dir: str | Path, k: str) -> pa.Table:
    """``triples_<k>`` of a DBP15k pair as the Parquet layout's edges: ``src``, ``dst`` (entity
    ids) and ``relation`` (its id)."""
    return _tsv(Path(pair_dir) / f"triples_{k}", ["src", "relation", "dst"],
                [pa.int64(), pa.int64(), pa.int64()]).select(["src", "dst", "relation"])


def _kg(pair_dir: Path, k: str, names: dict[int, str]) -> Graph:
    """One KG from ``ent_ids_<k>`` (node order, URIs) and ``triples_<k>`` (edges and
    relations)."""
    entities = _tsv(pair_dir / f"ent_ids_{k}", ["id", "uri"], [pa.int64(), pa.string()])
    ids = entities["id"].to_pylist()
    node_names = [names.get(i) or _uri_name(uri)
                  for i, uri in zip(ids, entities["uri"].to_pylist())]
    nodes = pa.table({"id": entities["id"], "name": node_names})
    return graph_from_tables(triples(pair_dir, k), nodes, name=str(pair_dir / f"triples_{k}"))


def _tsv(path: Path, columns: list[str], types: list[pa.DataType]) -> pa.Table:
    try:
        return pacsv.read_csv(path, read_options=pacsv.ReadOptions(column_names=columns),
                              parse_options=pacsv.ParseOptions(delimiter="\t", quote_char=False),
                              convert_options=pacsv.ConvertOptions(
                                  column_types=dict(zip(columns, types))))
    except (OSError, pa.ArrowInvalid) as e:
        raise InputError(f"{path}: {str(e).strip().splitlines()[0]}") from None


def _read_names(path: Path) -> dict[int, str]:
    """The translated names file: a JSON list of ``[id, [tokens]]``, tokens joined by spaces."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path} line {e.lineno}: invalid JSON ({e.msg})") from None
    if not isinstance(entries, list):
        raise InputError(f"{path}: expected a JSON list of [id, [tokens]]")
    names = {}
    for i, entry in enumerate(entries):
        if not (isinstance(entry, list) and len(entry) == 2 and type(entry[0]) is int
                and isinstance(entry[1], list) and all(isinstance(t, str) for t in entry[1])):
            raise InputError(f"{path}: entry {i + 1} is not [id, [tokens]]: {entry!r:.80}")
        names[entry[0]] = " ".join(entry[1])
    return names


def _uri_name(uri: str) -> str:
    """Fallback name of an entity: the last path segment of its URI, ``_`` read as a space."""
    return uri.rstrip("/").rsplit("/", 1)[-1].replace("_", " ")
