"""The job: inputs in, one committed output, whichever runner computes the matches.

:func:`run_job` is the skeleton every command shares (``align``, ``align-supervised``,
``demo``, the Ray entrypoint ``jobs/align.py``):

1. check the output before any work (:func:`write.check_output`);
2. fetch and load the inputs, fingerprint them for the run's identity;
3. resume from the checkpoint of an earlier run of the same job that got past its assign
   stage, else let the runner compute and stage the matches;
4. commit ``matches/``, ``metrics.json`` and ``manifest.json`` atomically, under a lock on
   the output (:func:`write.staging`); or, with ``job.out_format = "delta"``, add the run to
   a Delta table as its run date's partition (:func:`write.commit_delta`).

A :class:`Runner` computes: :class:`Local` in this process (with the automatic choices of
:mod:`tfgm_dist.auto`), :class:`Supervised` through a labelled collection
(``align-supervised``), or :class:`OnRay` on a Ray cluster (:mod:`tfgm_dist.distributed`).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
import uuid
from datetime import datetime, timezone
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

from . import auto, checkpoint, write
from .config import Config
from .errors import InputError
from .graph import Graph
from .load import fetch
from .pipeline import Pair, Result, device, load_pair
from .stopwatch import Stopwatch, peak_gpu_bytes, peak_rss_bytes

if TYPE_CHECKING:  # distributed imports Ray: only the Ray runner loads it
    from .distributed import Events

log = logging.getLogger(__name__)

INPUTS = ("source", "target", "seeds", "gold", "candidates", "queries")
METRICS_SCHEMA = "tfgm-dist/metrics/2"  # raised when a key changes; 2: hits and accuracy as rates


class Runner(Protocol):
    """Computes a loaded pair's matches and writes them into the staging folder."""

    def run(self, pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
            about: dict[str, Any], resume: write.Location) -> tuple[dict, list[dict]]:
        """The quality metrics and the manifest entries of the files written to ``stage``;
        ``resume`` receives the checkpoint (see :mod:`tfgm_dist.checkpoint`)."""
        ...

    def report(self) -> dict[str, Any]:
        """Extra sections for ``metrics.json`` (e.g. ``ray``); empty when none."""
        ...


class Local:
    """Every stage in this process, with the automatic choices (:func:`auto.align`)."""

    def run(self, pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
            about: dict[str, Any], resume: write.Location) -> tuple[dict, list[dict]]:
        return _kept(auto.align(pair, cfg, watch), pair, cfg, watch, stage, about, resume)

    def report(self) -> dict[str, Any]:
        return {}


class Supervised:
    """``align-supervised``: the pair matched through a labelled collection
    (:func:`supervised.align_supervised`), in this process."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection

    def run(self, pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
            about: dict[str, Any], resume: write.Location) -> tuple[dict, list[dict]]:
        from .supervised import align_supervised
        result = align_supervised(pair, self.collection, cfg, watch)
        return _kept(result, pair, cfg, watch, stage, about, resume)

    def report(self) -> dict[str, Any]:
        c = self.collection
        return {"collection": {"graphs": c.num_graphs, "nodes": c.graph.num_nodes,
                               "labels": c.num_labels}}


def _kept(result: Result, pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
          about: dict[str, Any], resume: write.Location) -> tuple[dict, list[dict]]:
    """Checkpoint ``result`` and stage its match table as one file."""
    with watch.stage("checkpoint"):
        checkpoint.save_piece(resume, 0, result)
        checkpoint.save_done(resume, result.metrics, 1)
    with watch.stage("write"):
        table = write.match_table(pair, result, cfg.top_k, cfg.assign.min_confidence)
        files = [write.write_matches(stage, table, about)]
    return result.metrics, files


class OnRay:
    """The job on Ray with ``cfg.ray.partitions`` parts: the graphs loaded by workers
    (:meth:`loaded`), the automatic choices, and where they run passes (the held-out
    estimate, bootstrapping) those in one Ray task (:func:`~tfgm_dist.distributed.prepare`).
    ``events`` hears of each embedding layer and search part as it is submitted (the fault
    tests kill actors there)."""

    def __init__(self, events: Events | None = None) -> None:
        self.events = events
        self.summary: dict[str, Any] = {}
        self.usage: list[dict] = []  # of the processes that loaded the graphs

    def loaded(self, cfg: Config) -> Callable[[str | Path, str | Path], tuple[Graph, Graph]]:
        """How :func:`~tfgm_dist.pipeline.load_pair` loads the graphs for this runner: in
        workers, the driver keeping their ids and the handles of their edges
        (:func:`~tfgm_dist.distributed.loaded`), on the cluster it joins here."""
        from . import distributed
        distributed.connect(cfg.ray.address)
        self.usage = []  # this job's, not an earlier one's of the same runner
        return partial(distributed.loaded, cfg=cfg, fmt=cfg.job.format or None,
                       usage=self.usage)

    def run(self, pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
            about: dict[str, Any], resume: write.Location) -> tuple[dict, list[dict]]:
        from . import distributed
        smaller = min(pair.source.num_nodes, pair.target.num_nodes)
        if cfg.ray.partitions > smaller:
            raise InputError(f"ray.partitions = {cfg.ray.partitions} exceeds the {smaller} "
                             "nodes of the smaller graph")
        # joined where the graphs were loaded (:meth:`loaded`); a pair given in memory
        # joins here and its edges are put into the object store
        distributed.connect(cfg.ray.address)
        pair = distributed.held_pair(pair)
        pair, cfg, prepared, usage = distributed.prepare(pair, cfg, watch)
        on_ray = distributed.Run(pair, cfg, cfg.ray.partitions, watch, self.events, prepared,
                                 self.usage + usage)
        quality, files = on_ray.align_and_write(stage, about, resume)
        self.summary = {"ray": on_ray.report()}
        return quality, files

    def report(self) -> dict[str, Any]:
        return self.summary


def run_job(cfg: Config, runner: Runner | None = None, *, collection: str | None = None
            ) -> dict[str, Any]:
    """The whole job ``cfg.job`` describes: load, compute, write ``cfg.job.out`` atomically.

    ``runner`` defaults to :class:`OnRay` when ``cfg.ray.partitions`` is set, else
    :class:`Local`; with a ``collection`` folder of labelled graphs it is
    :class:`Supervised`. A job killed after its assign stage resumes from its checkpoint.
    Returns the metrics written."""
    job = cfg.job
    for name in ("source", "target", "out"):
        if not getattr(job, name):
            raise InputError(f"no {name} given (argument or job.{name} in the config)")
    paths = {name: getattr(job, name) or None for name in INPUTS}
    if collection is not None:
        if job.seeds:
            raise InputError(f"{job.seeds}: align-supervised takes no seed pairs")
        paths["collection"] = collection
    delta = job.out_format == "delta"
    out = write.check_output(job.out, job.overwrite, job.output_root, delta=delta)
    if not cfg.ray.partitions:
        device(cfg)  # a GPU asked for and missing fails before the load, not after
    watch, start = Stopwatch(), time.perf_counter()
    run = {"schema_version": METRICS_SCHEMA, "run_id": run_id(), "started_at": _now()}
    if delta:
        run["run_date"] = job.run_date or datetime.now(timezone.utc).date().isoformat()
    if collection is None:
        runner = runner or (OnRay() if cfg.ray.partitions else Local())
    with _inputs_folder() as tmp:
        with watch.stage("load"):
            local = {name: fetch(path, tmp) if path else None for name, path in paths.items()}
            if collection is not None:
                from .supervised import load_collection
                runner = Supervised(load_collection(local["collection"], cfg.seed))
            pair = load_pair(local["source"], local["target"], cfg, fmt=job.format or None,
                             seeds=local["seeds"], gold=local["gold"],
                             candidates=local["candidates"], queries=local["queries"],
                             loaded=runner.loaded(cfg) if isinstance(runner, OnRay) else None)
            inputs = {name: {**write.fingerprint(local[name], out), "path": path}
                      for name, path in paths.items() if path}
        log.info("source %s: %d nodes, %d edges; target %s: %d nodes, %d edges",
                 pair.source.source, pair.source.num_nodes, pair.source.num_edges,
                 pair.target.source, pair.target.num_nodes, pair.target.num_edges)
        about = {"config": cfg.to_dict(), "versions": write.versions(), "inputs": inputs}
        resume = checkpoint.location(out, checkpoint.run_key(about))
        with write.staging(out, job.overwrite) as stage:
            done = checkpoint.load(resume)
            if done is None:
                quality, files = runner.run(pair, cfg, watch, stage, about, resume)
            else:
                quality, files = _resumed(pair, cfg, watch, stage, about, resume, done)
            extra = runner.report() | ({} if done is None else {"resumed_from": str(resume)})
            metrics = {**run, "finished_at": _now(), **quality,
                       "seconds": {**watch.seconds, "total": time.perf_counter() - start},
                       "peak_rss_bytes": peak_rss_bytes(),
                       **({} if (gpu := peak_gpu_bytes()) is None else {"peak_gpu_bytes": gpu}),
                       "rows": sum(f["rows"] for f in files),
                       "nodes": {"source": pair.source.num_nodes,
                                 "target": pair.target.num_nodes},
                       "input_stats": {"source": pair.source.stats,
                                       "target": pair.target.stats},
                       **extra}
            if delta:
                metrics["delta_version"] = write.commit_delta(stage, job.out, run["run_date"],
                                                              metrics, about)
            else:
                write.commit(stage, out, metrics, {"files": files, **about})
    checkpoint.discard(resume)
    return metrics


def run_id() -> str:
    """The run's id: the Ray submission id when ``ray job submit`` started it (Ray hands the
    entrypoint its job config, whose metadata holds it), else a new random one."""
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}"))
        submitted = config.get("metadata", {}).get("job_submission_id")
    except (ValueError, AttributeError):
        submitted = None
    return submitted or uuid.uuid4().hex


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _inputs_folder() -> tempfile.TemporaryDirectory:
    """A temporary folder for remote inputs, named after this process, after removing those
    of killed runs."""
    mark = f"tfgm-inputs-{socket.gethostname()}-"
    write.sweep_dead(tempfile.gettempdir(), mark)
    return tempfile.TemporaryDirectory(prefix=f"{mark}{os.getpid()}-")


def _resumed(pair: Pair, cfg: Config, watch: Stopwatch, stage: write.Location,
             about: dict[str, Any], resume: write.Location, done: tuple
             ) -> tuple[dict, list[dict]]:
    """The files of an earlier run's checkpoint, written again into ``stage``."""
    log.info("resuming from %s: an earlier run of this job got past the assign stage", resume)
    quality, parts = done
    with watch.stage("resume"), watch.stage("write"):
        files = [write.write_matches(stage, write.match_table(
            pair, checkpoint.load_piece(resume, q), cfg.top_k, cfg.assign.min_confidence),
            about, part=q) for q in range(parts)]
    return quality, files
