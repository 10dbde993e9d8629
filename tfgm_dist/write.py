"""Stage 6b, write: the matches as a Parquet dataset, the metrics and a manifest, atomically.

Layout of ``OUT``::

    OUT/matches/part-00000.parquet   source_id, target_id, rank, score (the user's ids)
    OUT/metrics.json                 hits@1, hits@10, mrr, accuracy, seconds, peak_rss_bytes
    OUT/manifest.json                written last: files, row counts, config, inputs, versions

Everything is written into a hidden staging folder beside ``OUT`` and renamed into place
in one step, so a reader sees either the previous complete result or the new one, never a
half-written one, and a failed run leaves nothing behind.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .graph import InputError

MANIFEST = "manifest.json"
FORMAT = "tfgm-dist/1"


def fingerprint(path: str | Path) -> dict[str, Any]:
    """Size and SHA-256 of an input file, or of every file (name, length, bytes) of a folder."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest, size = hashlib.sha256(), 0
    for f in files:
        if path.is_dir():
            digest.update(f"{f.relative_to(path)}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    return {"path": str(path), "bytes": size, "sha256": digest.hexdigest()}


def versions() -> dict[str, str]:
    import faiss
    import scipy
    import torch
    import torch_geometric

    from . import __version__
    return {"tfgm_dist": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "torch_geometric": torch_geometric.__version__, "faiss": faiss.__version__,
            "pyarrow": pa.__version__, "scipy": scipy.__version__}


def check_output(out: str | Path, overwrite: bool) -> Path:
    """Validate ``out`` before any work is done: refuse to replace a different run's output.

    A folder that holds a tfgm-dist manifest is replaced only with ``overwrite``; any other
    existing, non-empty path is never touched.
    """
    out = Path(out)
    if out.exists():
        if not out.is_dir():
            raise InputError(f"{out}: output path exists and is not a folder")
        if any(out.iterdir()):
            if not (out / MANIFEST).exists():
                raise InputError(f"{out}: output folder is not empty and holds no tfgm-dist "
                                 "result; refusing to write into it")
            if not overwrite:
                raise InputError(f"{out}: holds a previous run; pass --overwrite to replace it")
    if not out.parent.exists():
        raise InputError(f"{out.parent}: parent folder of the output does not exist")
    return out


@contextmanager
def staging(out: Path) -> Iterator[Path]:
    """A hidden staging folder beside ``out``; removed whatever happens (after a commit it
    no longer exists)."""
    stage = out.parent / f".{out.name}.staging-{uuid.uuid4().hex[:8]}"
    (stage / "matches").mkdir(parents=True)
    try:
        yield stage
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_matches(stage: Path, matches: pa.Table, run: dict[str, Any], part: int = 0,
                  row_group_size: int = 1 << 20) -> dict[str, Any]:
    """Write match rows as file ``part`` of the staged dataset; returns its manifest entry.

    Each worker of a distributed run writes its own part. ``run`` (config, inputs, versions)
    goes into every file's metadata as ``tfgm_dist.<key>`` JSON, so a file read on its own
    still says what produced it.
    """
    name = f"matches/part-{part:05d}.parquet"
    meta = {f"tfgm_dist.{key}".encode(): json.dumps(value).encode() for key, value in run.items()}
    pq.write_table(matches.replace_schema_metadata(meta), stage / name,
                   row_group_size=row_group_size)
    return {"path": name, "rows": matches.num_rows, "bytes": (stage / name).stat().st_size}


def commit(stage: Path, out: Path, metrics: dict[str, Any], manifest: dict[str, Any]) -> None:
    """Write ``metrics.json`` and, last, the manifest; then move the result to ``out``."""
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    manifest = {"format": FORMAT,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **manifest}
    (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    _swap_in(stage, out)


def _swap_in(stage: Path, out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        os.rename(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if out.exists():
            out.rmdir()
        os.rename(stage, out)
