"""The ``tfgm-dist`` command line: ``align``, ``align-supervised``, ``demo`` and ``synth``.

The ``align`` interface is a contract that outside tooling scripts against: options are
added, never renamed. Bad input ends with one ``error:`` line and exit status 2, and nothing
is written under the output path.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from typing import Callable

from . import auto, checkpoint, write
from .config import ASSIGN_METHODS, Config, load_config, with_overrides
from .graph import InputError
from .load import fetch
from .pipeline import Stopwatch, load_pair, match_table, peak_rss_bytes

log = logging.getLogger("tfgm_dist")


def run(cfg: Config, progress: Callable[[str, dict], None] | None = None,
        collection: str | None = None) -> dict:
    """The whole job ``cfg.job`` describes: load, align, write ``out`` atomically.

    With ``cfg.ray.partitions`` > 0 the stages after load run on Ray (see
    :mod:`tfgm_dist.distributed`); ``progress`` then hears of each embedding layer. With a
    ``collection`` of labelled graphs the pair is matched through it (``align-supervised``,
    :mod:`tfgm_dist.supervised`; its label search is what runs on Ray). A job killed after
    its assign stage resumes from its checkpoint. Returns the metrics written.
    """
    job = cfg.job
    paths = {name: getattr(job, name) or None
             for name in ("source", "target", "seeds", "gold", "candidates", "queries")}
    for name in ("source", "target", "out"):
        if not getattr(job, name):
            raise InputError(f"no {name} given (argument or job.{name} in the config)")
    if collection is not None:
        if job.seeds:
            raise InputError(f"{job.seeds}: align-supervised takes no seed pairs")
        paths["collection"] = collection
    out = write.check_output(job.out, job.overwrite, job.output_root)
    watch, start = Stopwatch(), time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tfgm-inputs-") as tmp, watch.stage("load"):
        local = {name: fetch(path, tmp) if path else None for name, path in paths.items()}
        if collection is not None:
            from .supervised import load_collection
            coll = load_collection(local["collection"], cfg.seed)
        pair = load_pair(local["source"], local["target"], cfg, fmt=job.format or None,
                         seeds=local["seeds"], gold=local["gold"],
                         candidates=local["candidates"], queries=local["queries"])
        inputs = {name: {**write.fingerprint(local[name]), "path": path}
                  for name, path in paths.items() if path}
    log.info("source %s: %d nodes, %d edges; target %s: %d nodes, %d edges",
             pair.source.source, pair.source.num_nodes, pair.source.num_edges,
             pair.target.source, pair.target.num_nodes, pair.target.num_edges)
    about = {"config": cfg.to_dict(), "versions": write.versions(), "inputs": inputs}
    resume = checkpoint.location(out, checkpoint.run_key(about))
    done = checkpoint.load(resume)
    extra = {} if collection is None else {"collection": {
        "graphs": coll.num_graphs, "nodes": coll.graph.num_nodes, "labels": coll.num_labels}}
    with write.staging(out) as stage:
        if done is not None:
            log.info("resuming from %s: an earlier run of this job got past the assign stage",
                     resume)
            quality, parts = done
            with watch.stage("resume"), watch.stage("write"):
                files = [write.write_matches(stage, match_table(
                    pair, checkpoint.load_piece(resume, q), cfg.top_k,
                    cfg.assign.min_confidence), about, part=q)
                    for q in range(parts)]
            extra["resumed_from"] = str(resume)
        elif cfg.ray.partitions and collection is None:
            pair, cfg, prepared = auto.prepare(pair, cfg, watch)
            smaller = min(pair.source.num_nodes, pair.target.num_nodes)
            if cfg.ray.partitions > smaller:
                raise InputError(f"ray.partitions = {cfg.ray.partitions} exceeds the "
                                 f"{smaller} nodes of the smaller graph")
            from . import distributed
            distributed.connect(cfg.ray.address)
            on_ray = distributed.Run(pair, cfg, cfg.ray.partitions, watch, progress, prepared)
            quality, files = on_ray.align_and_write(stage, about, resume)
            extra["ray"] = on_ray.report()
        else:
            if collection is None:
                result = auto.align(pair, cfg, watch)
            else:
                from .supervised import align_supervised
                result = align_supervised(pair, coll, cfg, watch)
            with watch.stage("checkpoint"):
                checkpoint.save_piece(resume, 0, result)
                checkpoint.save_done(resume, result.metrics, 1)
            with watch.stage("write"):
                files = [write.write_matches(stage, match_table(pair, result, cfg.top_k,
                                                                cfg.assign.min_confidence), about)]
            quality = result.metrics
        metrics = {**quality,
                   "seconds": {**watch.seconds, "total": time.perf_counter() - start},
                   "peak_rss_bytes": peak_rss_bytes(),
                   "rows": sum(f["rows"] for f in files),
                   "nodes": {"source": pair.source.num_nodes, "target": pair.target.num_nodes},
                   "input_stats": {"source": pair.source.stats, "target": pair.target.stats},
                   **extra}
        write.commit(stage, out, metrics, {"files": files, **about})
    checkpoint.discard(resume)
    return metrics


def _config(args: argparse.Namespace) -> Config:
    """The config file with the command line's settings on top."""
    cfg = load_config(args.config)
    given = vars(args)
    overrides = {"top_k": args.top_k, "refine.enabled": args.refine, "assign.method": args.assign,
                 "seed": args.seed, "job.out": args.out,
                 "job.overwrite": args.overwrite or None, "ray.partitions": args.partitions,
                 "ray.address": args.ray_address, "assign.min_confidence": args.min_confidence}
    for name in ("source", "target", "format", "seeds", "gold", "candidates", "queries"):
        overrides[f"job.{name}"] = given.get(name)
    return with_overrides(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="output folder (matches/, metrics.json, manifest.json)")
    p.add_argument("--config", help="TOML or YAML file with any of the settings")
    p.add_argument("--top-k", type=int, help="rows written per source (default 1)")
    p.add_argument("--refine", action=argparse.BooleanOptionalAction, default=None,
                   help="training-free consensus refinement")
    p.add_argument("--assign", choices=ASSIGN_METHODS, help="decoding (default argmax)")
    p.add_argument("--min-confidence", type=float, metavar="C",
                   help="write only sources whose match has confidence >= C, in [0, 1]")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an output folder that holds a previous run")
    p.add_argument("--partitions", type=int, help="run on Ray with P graph partitions "
                   "(embedding actors and search shards); default: one process, no Ray")
    p.add_argument("--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else a "
                   "local cluster started in-process)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfgm-dist", description=__doc__.splitlines()[0])
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("align", help="align SOURCE with TARGET")
    a.add_argument("source", nargs="?", help="graph file or Parquet-layout folder "
                   "(default: job.source of the config)")
    a.add_argument("target", nargs="?", help="graph file or Parquet-layout folder "
                   "(default: job.target of the config)")
    a.add_argument("--format", choices=("edgelist", "triples", "gw", "parquet"),
                   help="input format (default: from the extension)")
    a.add_argument("--seeds", help="known pairs: two-column TSV/CSV/Parquet (source, target)")
    a.add_argument("--gold", help="true pairs to score against (two columns)")
    a.add_argument("--candidates", help="one-column file of target ids to search among")
    a.add_argument("--queries", help="one-column file of source ids to output")
    _run_options(a)

    v = sub.add_parser("align-supervised", help="align SOURCE with TARGET through a "
                       "collection of labelled graphs (supervised TFGMws)")
    v.add_argument("collection", help="folder of labelled graphs: Parquet-layout folders with "
                   "a label column in nodes.parquet, or graph files with <stem>.labels beside")
    v.add_argument("source", nargs="?", help="graph file or Parquet-layout folder")
    v.add_argument("target", nargs="?", help="graph file or Parquet-layout folder")
    v.add_argument("--format", choices=("edgelist", "triples", "gw", "parquet"),
                   help="input format of SOURCE and TARGET (default: from the extension)")
    v.add_argument("--gold", help="true pairs to score against (two columns)")
    _run_options(v)

    d = sub.add_parser("demo", help="align a built-in synthetic pair (no data needed)")
    d.add_argument("--nodes", type=int, default=20000, help="nodes per graph (default 20000)")
    _run_options(d)

    s = sub.add_parser("synth", help="write a synthetic pair in the Parquet input layout")
    s.add_argument("out", help="folder to write source/, target/ and gold.parquet into")
    s.add_argument("--nodes", type=int, default=20000)
    s.add_argument("--mean-degree", type=float, default=10.0)
    s.add_argument("--edge-noise", type=float, default=0.05)
    s.add_argument("--feature-dim", type=int, default=128)
    s.add_argument("--feature-noise", type=float, default=0.5)
    s.add_argument("--seed", type=int, default=0)
    return p


def _demo(args: argparse.Namespace) -> dict:
    from .synth import write_pair

    cfg = _config(args)
    out = cfg.job.out or "tfgm-demo-out"
    with tempfile.TemporaryDirectory(prefix="tfgm-demo-") as tmp:
        log.info("demo: writing a synthetic pair of %d nodes to %s", args.nodes, tmp)
        paths = write_pair(tmp, args.nodes, seed=cfg.seed)
        metrics = run(with_overrides(cfg, **{"job.source": str(paths["source"]),
                                             "job.target": str(paths["target"]),
                                             "job.gold": str(paths["gold"]), "job.out": out}))
    print(f"results in {out}/")
    return metrics


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    try:
        if args.command == "synth":
            from .synth import write_pair
            paths = write_pair(args.out, args.nodes, seed=args.seed, mean_degree=args.mean_degree,
                               edge_noise=args.edge_noise, feature_dim=args.feature_dim,
                               feature_noise=args.feature_noise)
            print(json.dumps({k: str(v) for k, v in paths.items()}))
            return 0
        if args.command == "demo":
            metrics = _demo(args)
        elif args.command == "align-supervised":
            metrics = run(_config(args), collection=args.collection)
        else:
            metrics = run(_config(args))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
