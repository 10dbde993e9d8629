"""The ``tfgm-dist`` command line: ``align``, ``demo`` and ``synth``.

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
from pathlib import Path

from . import write
from .config import ASSIGN_METHODS, Config, load_config, with_overrides
from .graph import InputError
from .pipeline import Stopwatch, align, load_pair, match_table, peak_rss_bytes

log = logging.getLogger("tfgm_dist")


def run(source: str | Path, target: str | Path, out: str | Path, cfg: Config, *,
        fmt: str | None = None, seeds: str | Path | None = None, gold: str | Path | None = None,
        candidates: str | Path | None = None, queries: str | Path | None = None,
        overwrite: bool = False) -> dict:
    """The whole job: load, align, write ``out`` atomically; returns the metrics written."""
    out = write.check_output(out, overwrite)
    watch, start = Stopwatch(), time.perf_counter()
    with watch.stage("load"):
        pair = load_pair(source, target, cfg, fmt=fmt, seeds=seeds, gold=gold,
                         candidates=candidates, queries=queries)
    log.info("source %s: %d nodes, %d edges; target %s: %d nodes, %d edges",
             pair.source.source, pair.source.num_nodes, pair.source.num_edges,
             pair.target.source, pair.target.num_nodes, pair.target.num_edges)
    result = align(pair, cfg, watch)
    with write.staging(out) as stage:
        with watch.stage("write"):
            table = match_table(pair, result, cfg.top_k)
            part = write.write_matches(stage, table, cfg.to_dict())
        metrics = {**result.metrics,
                   "seconds": {**watch.seconds, "total": time.perf_counter() - start},
                   "peak_rss_bytes": peak_rss_bytes(),
                   "rows": table.num_rows,
                   "nodes": {"source": pair.source.num_nodes, "target": pair.target.num_nodes},
                   "input_stats": {"source": pair.source.stats, "target": pair.target.stats}}
        inputs = {name: write.fingerprint(path) for name, path in
                  (("source", source), ("target", target), ("seeds", seeds), ("gold", gold),
                   ("candidates", candidates), ("queries", queries)) if path is not None}
        write.commit(stage, out, metrics, {"files": [part], "config": cfg.to_dict(),
                                           "inputs": inputs, "versions": write.versions()})
    return metrics


def _config(args: argparse.Namespace) -> Config:
    cfg = load_config(args.config)
    overrides = {"top_k": args.top_k, "refine.enabled": args.refine, "assign.method": args.assign,
                 "seed": args.seed}
    return with_overrides(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _run_options(p: argparse.ArgumentParser, out_required: bool = True) -> None:
    p.add_argument("--out", required=out_required, help="output folder (matches/, "
                   "metrics.json, manifest.json)")
    p.add_argument("--config", help="TOML or YAML file with any of the settings")
    p.add_argument("--top-k", type=int, help="rows written per source (default 1)")
    p.add_argument("--refine", action=argparse.BooleanOptionalAction, default=None,
                   help="training-free consensus refinement")
    p.add_argument("--assign", choices=ASSIGN_METHODS, help="decoding (default argmax)")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an output folder that holds a previous run")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfgm-dist", description=__doc__.splitlines()[0])
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("align", help="align SOURCE with TARGET")
    a.add_argument("source", help="graph file or Parquet-layout folder")
    a.add_argument("target", help="graph file or Parquet-layout folder")
    a.add_argument("--format", choices=("edgelist", "triples", "gw", "parquet"),
                   help="input format (default: from the extension)")
    a.add_argument("--seeds", help="known pairs: two-column TSV/CSV/Parquet (source, target)")
    a.add_argument("--gold", help="true pairs to score against (two columns)")
    a.add_argument("--candidates", help="one-column file of target ids to search among")
    a.add_argument("--queries", help="one-column file of source ids to output")
    _run_options(a)

    d = sub.add_parser("demo", help="align a built-in synthetic pair (no data needed)")
    d.add_argument("--nodes", type=int, default=20000, help="nodes per graph (default 20000)")
    _run_options(d, out_required=False)

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

    out = Path(args.out or "tfgm-demo-out")
    cfg = _config(args)
    with tempfile.TemporaryDirectory(prefix="tfgm-demo-") as tmp:
        log.info("demo: writing a synthetic pair of %d nodes to %s", args.nodes, tmp)
        paths = write_pair(tmp, args.nodes, seed=cfg.seed)
        metrics = run(paths["source"], paths["target"], out, cfg, gold=paths["gold"],
                      overwrite=args.overwrite)
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
        else:
            metrics = run(args.source, args.target, args.out, _config(args), fmt=args.format,
                          seeds=args.seeds, gold=args.gold, candidates=args.candidates,
                          queries=args.queries, overwrite=args.overwrite)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
