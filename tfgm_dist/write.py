"""Stage 6b, write: the matches as a Parquet dataset, the metrics and a manifest, atomically.

Layout of ``OUT``::

    OUT/matches/part-00000.parquet   source_id, target_id, rank, score (the user's ids)
    OUT/metrics.json                 hits@1, hits@10, mrr, accuracy (rates), seconds, peak_rss_bytes
    OUT/manifest.json                written last: files, row counts, config, inputs, versions

``OUT`` is a local path or a pyarrow filesystem URI (``s3://``, ``gs://``, ``hdfs://``,
``file://``). Everything is written into a hidden staging folder beside ``OUT``. On a local
filesystem it is renamed into place in one step, so a reader sees either the previous
complete result or the new one; on an object store, which cannot rename a folder, the new
files are copied under names of their own and the manifest last, and only then are the old
run's files deleted, so a reader that follows ``manifest.json`` never sees half a result.
A failed run leaves nothing behind.

With ``job.out_format = "delta"`` ``OUT`` is instead a Delta Lake table of dated runs
(:func:`commit_delta`): the staged matches are appended in one transaction that replaces
the partition of the run's date, and the commit's metadata keeps the run's metrics,
config, inputs and versions.
"""
from __future__ import annotations

import hashlib
import json
import os
import logging
import shutil
import socket
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import torch

from .errors import InputError, one_line
from .load import DELTA_LOG
from .search import Candidates

if TYPE_CHECKING:
    from .pipeline import Pair, Result

log = logging.getLogger(__name__)

MANIFEST = "manifest.json"
RUN_METADATA = "tfgm-dist.run"  # the key of a Delta commit's metadata holding the run
FORMAT = "tfgm-dist/1"


def fingerprint(path: str | Path, out: Location | None = None) -> dict[str, Any]:
    """Size and SHA-256 of an input file, or of every file (name, length, bytes) of a folder.

    Within a folder, ``out`` and what a run writes beside it (its staging folder, its lock)
    are left out: an output placed inside an input folder must not change the input's
    identity, or a rerun would never resume."""
    path = Path(path)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    if out is not None and out.local and path.is_dir():
        own = Path(out.path)
        files = [f for f in files if not _written_by_run(f, own)]
    digest, size = hashlib.sha256(), 0
    for f in files:
        if path.is_dir():
            digest.update(f"{f.relative_to(path)}\0{f.stat().st_size}\0".encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    return {"path": str(path), "bytes": size, "sha256": digest.hexdigest()}


def _written_by_run(f: Path, out: Path) -> bool:
    """Whether ``f`` lies in ``out`` or in a ``.OUT.*`` staging folder or lock beside it."""
    for parent in (f, *f.parents):
        if parent == out or parent.parent == out.parent and parent.name.startswith(
                f".{out.name}."):
            return True
    return False


def versions() -> dict[str, str]:
    import faiss
    import scipy
    import torch

    from . import __version__
    # PyG's version from its metadata: importing it would cost 2.8 s (see embed.graph_operator)
    return {"tfgm_dist": __version__, "python": sys.version.split()[0], "torch": torch.__version__,
            "torch_geometric": metadata.version("torch_geometric"), "faiss": faiss.__version__,
            "pyarrow": pa.__version__, "scipy": scipy.__version__}


@dataclass(frozen=True)
class Location:
    """A folder on a pyarrow filesystem: a local path, ``file://``, ``s3://``, ``gs://``,
    ``hdfs://`` ... (whatever ``pyarrow.fs.FileSystem.from_uri`` resolves)."""

    fs: pafs.FileSystem
    path: str

    def __truediv__(self, name: str) -> "Location":
        return Location(self.fs, f"{self.path.rstrip('/')}/{name}")

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    @property
    def parent(self) -> "Location":
        return Location(self.fs, self.path.rstrip("/").rsplit("/", 1)[0] or "/")

    @property
    def local(self) -> bool:
        return isinstance(self.fs, pafs.LocalFileSystem)

    def info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def listing(self, recursive: bool = True) -> list[pafs.FileInfo]:
        return self.fs.get_file_info(pafs.FileSelector(self.path, recursive=recursive))

    def write_text(self, text: str) -> None:
        with self.fs.open_output_stream(self.path) as f:
            f.write(text.encode())

    def __str__(self) -> str:
        return self.path if self.local else f"{self.fs.type_name}://{self.path}"


def location(out: str | Path | Location) -> Location:
    """The :class:`Location` of a path or URI; relative local paths are made absolute."""
    if isinstance(out, Location):
        return out
    text = str(out)
    if "://" in text:
        try:
            fs, path = pafs.FileSystem.from_uri(text)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as e:
            raise InputError(f"{text}: cannot open this output location ({e})") from None
        return Location(fs, path)
    return Location(pafs.LocalFileSystem(), os.path.abspath(text))


def check_output(out: str | Path | Location, overwrite: bool, root: str = "",
                 delta: bool = False) -> Location:
    """Validate ``out`` before any work is done: refuse to replace a different run's output.

    A folder that holds a tfgm-dist manifest is replaced only with ``overwrite``; any other
    existing, non-empty folder is never touched. With ``delta``, ``out`` is a Delta table
    (or an empty or new folder) that the run is added to. With ``root``
    (``job.output_root``), ``out`` must lie inside it, after resolving ``..`` and symbolic
    links.
    """
    out = location(out)
    if root:
        base = location(root)
        inside, top = ((os.path.realpath(out.path), os.path.realpath(base.path)) if out.local
                       else (os.path.normpath(out.path), os.path.normpath(base.path)))
        if type(out.fs) is not type(base.fs) or os.path.commonpath([inside, top]) != top \
                or inside == top:
            raise InputError(f"{out}: output path is outside the output root {base} "
                             "(job.output_root)")
    info = out.info()
    if info.type == pafs.FileType.File:
        raise InputError(f"{out}: output path exists and is not a folder")
    if info.type == pafs.FileType.Directory and out.listing(recursive=False):
        if delta:
            if (out / DELTA_LOG).info().type != pafs.FileType.Directory:
                raise InputError(f"{out}: output folder is not empty and is not a Delta "
                                 "table; refusing to write into it")
        elif not _holds_run(out):
            raise InputError(f"{out}: output folder is not empty and holds no tfgm-dist "
                             "result; refusing to write into it")
        else:
            _refuse_replacing(out, overwrite)
    if out.local and not os.path.isdir(out.parent.path):
        raise InputError(f"{out.parent}: parent folder of the output does not exist")
    return out


def _holds_run(out: Location) -> bool:
    return (out / MANIFEST).info().type == pafs.FileType.File


def _refuse_replacing(out: Location, overwrite: bool) -> None:
    """Raise :class:`InputError` if ``out`` holds a run and ``overwrite`` is not given."""
    if not overwrite and _holds_run(out):
        raise InputError(f"{out}: holds a previous run; pass --overwrite to replace it")


@contextmanager
def staging(out: Location, overwrite: bool = False) -> Iterator[Location]:
    """A hidden staging folder beside ``out``, on its filesystem, held under ``out``'s lock
    (:func:`locked`); removed whatever happens (after a commit it no longer exists). Under
    the lock ``out`` is checked again: a run that finished since :func:`check_output` is
    replaced only with ``overwrite``.

    Its name carries this host and process id, so that any later run writing beside it can
    remove the staging folders of runs that were killed (which no ``finally`` could clean up).
    """
    with locked(out):
        _refuse_replacing(out, overwrite)
        _sweep_killed(out)
        stage = out.parent / (f".{out.name}.staging-{socket.gethostname()}-{os.getpid()}-"
                              f"{uuid.uuid4().hex[:8]}")
        stage.fs.create_dir((stage / "matches").path, recursive=True)
        try:
            yield stage
        finally:
            if stage.info().type != pafs.FileType.NotFound:
                stage.fs.delete_dir(stage.path)


@contextmanager
def locked(out: Location) -> Iterator[None]:
    """Hold ``.OUT.lock`` beside a local ``out`` exclusively, or raise :class:`InputError`:
    two runs writing one output would silently replace each other's result. The lock file is
    removed on the way out; a run that opened it before then finds it unlinked and retries
    on the new one, so the lock is never held twice. Object stores have no lock: not here."""
    if not out.local:
        yield
        return
    import fcntl
    path = os.path.join(out.parent.path, f".{out.name}.lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InputError(f"{out}: another run is writing this output (lock {path})") from None
        try:
            if os.path.exists(path) and os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)
        os.close(fd)


def _sweep_killed(out: Location) -> None:
    """Remove the staging folders that dead processes on this host left beside ``out``,
    whichever output they were for."""
    if out.local and os.path.isdir(out.parent.path):
        sweep_dead(out.parent.path, f".staging-{socket.gethostname()}-")


def sweep_dead(folder: str | Path, mark: str) -> None:
    """Remove the entries of ``folder`` named ``…{mark}{pid}-…`` whose process is dead: what
    a killed run of this host left (no ``finally`` runs in a killed process)."""
    for entry in os.scandir(folder):
        if mark not in entry.name:
            continue
        pid = entry.name.rsplit(mark, 1)[1].split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            log.warning("removing %s, left by a killed run (pid %s)", entry.path, pid)
            shutil.rmtree(entry.path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def match_table(pair: Pair, result: Result, top_k: int, min_confidence: float = 0.0
                ) -> pa.Table:
    """Rows ``(source_id, target_id, rank, score, confidence)`` in the user's ids.

    Rank 1 is the decoded match (for ``argmax`` simply the best candidate) with its
    confidence; ranks 2 .. ``top_k`` are the next best other candidates (confidence null).
    A source that the decoding left without a target (``mutual`` or ``one-to-one``) gets one
    row of rank 1 with a null target, score and confidence. With ``min_confidence`` > 0 only
    sources whose match has at least that confidence are written.
    """
    c, matched = result.candidates, result.matched
    others = Candidates.sorted(c.scores, c.index.masked_fill(c.index == matched[:, None], -1))
    index = torch.cat([matched[:, None], others.index[:, :top_k - 1]], 1)
    scores = torch.cat([result.matched_score[:, None], others.scores[:, :top_k - 1]], 1)
    conf = torch.full(index.shape, torch.nan)
    if result.confidence is not None:
        conf[:, 0] = result.confidence
    keep = (index >= 0) & (matched >= 0)[:, None]
    keep[:, 0] = True
    if min_confidence > 0:
        keep &= (conf[:, :1] >= min_confidence)  # NaN (unmatched, uncalibrated) fails
    r = torch.arange(index.size(0))[:, None].expand_as(index)
    rank = torch.arange(1, index.size(1) + 1, dtype=torch.int32)[None, :].expand_as(index)
    found = index[keep] >= 0
    return pa.table({
        "source_id": pair.source.ids.take(pa.array(result.rows[r[keep]].numpy())),
        "target_id": pair.target.ids.take(pa.array(index[keep].clamp(min=0).numpy(),
                                                   mask=~found.numpy())),
        "rank": pa.array(rank[keep].numpy()),
        "score": pa.array(scores[keep].numpy().astype(np.float32), mask=~found.numpy()),
        "confidence": pa.array(conf[keep].numpy().astype(np.float32),
                               mask=np.isnan(conf[keep].numpy())),
    })


def write_matches(stage: Location, matches: pa.Table, run: dict[str, Any], part: int = 0,
                  row_group_size: int = 1 << 20) -> dict[str, Any]:
    """Write match rows as file ``part`` of the staged dataset; returns its manifest entry.

    Each worker of a distributed run writes its own part. ``run`` (config, inputs, versions)
    goes into every file's metadata as ``tfgm_dist.<key>`` JSON, so a file read on its own
    still says what produced it.
    """
    name = f"matches/part-{part:05d}.parquet"
    meta = {f"tfgm_dist.{key}".encode(): json.dumps(value).encode() for key, value in run.items()}
    pq.write_table(matches.replace_schema_metadata(meta), (stage / name).path,
                   filesystem=stage.fs, row_group_size=row_group_size)
    return {"path": name, "rows": matches.num_rows, "bytes": (stage / name).info().size}


def commit(stage: Location, out: Location, metrics: dict[str, Any],
           manifest: dict[str, Any]) -> None:
    """Write ``metrics.json`` and, last, the manifest; then move the result to ``out``."""
    (stage / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    manifest = {"format": FORMAT,
                "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **manifest}
    if out.local:
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        _swap_in(Path(stage.path), Path(out.path))
    else:
        _copy_in(stage, out, manifest)


def commit_delta(stage: Location, table: str, run_date: str, metrics: dict[str, Any],
                 manifest: dict[str, Any]) -> int:
    """Add the staged matches to the Delta table at ``table`` (a path or URI) as the run of
    ``run_date``, in one transaction; returns the table's new version.

    Rows gain ``run_id`` and ``run_date`` (the partition column). The transaction replaces
    the partition of ``run_date`` whole, so a rerun of a date is idempotent and other dates
    stay; a reader sees the previous version until it commits, and a run that dies before
    leaves the table as it was. The commit's metadata (:data:`RUN_METADATA`, JSON) keeps
    the run's metrics and manifest: ``DeltaTable(table).history()`` lists every run.
    """
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import DeltaError, TableNotFoundError

    staged = ds.dataset((stage / "matches").path, filesystem=stage.fs, format="parquet")
    columns = {"run_id": pc.scalar(metrics["run_id"]),
               "run_date": pc.scalar(pa.scalar(date.fromisoformat(run_date), pa.date32())),
               **{name: pc.field(name) for name in staged.schema.names}}
    rows = staged.scanner(columns=columns).to_reader()
    run = json.dumps({"metrics": metrics, "manifest": manifest}, default=str)
    try:
        write_deltalake(table, rows, mode="overwrite", partition_by=["run_date"],
                        predicate=f"run_date = '{run_date}'",
                        commit_properties=CommitProperties(custom_metadata={RUN_METADATA: run}))
        return DeltaTable(table).version()
    except (DeltaError, TableNotFoundError, OSError) as e:
        raise InputError(f"{table}: cannot add the run to this Delta table "
                         f"({one_line(e)})") from None


def _swap_in(stage: Path, out: Path) -> None:
    """Local filesystems: two renames, so ``out`` is always a whole run."""
    if out.exists() and any(out.iterdir()):
        old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
        os.rename(out, old)
        os.rename(stage, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        if out.exists():
            out.rmdir()
        os.rename(stage, out)


def _copy_in(stage: Location, out: Location, manifest: dict[str, Any]) -> None:
    """Object stores have no folder rename: copy the new run's files under names of their
    own, then its manifest (one object written whole), and only then delete what the new
    manifest does not list. A reader that follows ``manifest.json`` sees the old run or the
    new one, whole; a run that dies before its manifest lands leaves the old run intact."""
    fs, tag = out.fs, uuid.uuid4().hex[:8]
    renamed = {f["path"]: f"matches/{tag}-{f['path'].rsplit('/', 1)[-1]}"
               for f in manifest.get("files", [])}
    fs.create_dir((out / "matches").path, recursive=True)
    for old, new in renamed.items():
        fs.copy_file((stage / old).path, (out / new).path)
    fs.copy_file((stage / "metrics.json").path, (out / "metrics.json").path)
    manifest = {**manifest, "files": [{**f, "path": renamed[f["path"]]}
                                      for f in manifest.get("files", [])]}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    keep = {(out / name).path for name in (*renamed.values(), "metrics.json", MANIFEST)}
    for info in out.listing():
        if info.type == pafs.FileType.File and info.path not in keep:
            fs.delete_file(info.path)
    fs.delete_dir(stage.path)
