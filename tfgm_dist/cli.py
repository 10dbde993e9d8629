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
from typing import Callable

from . import __version__
from .config import ASSIGN_METHODS, OUT_FORMATS, Config, load_config, setting, with_overrides
from .errors import InputError, JobError
from .stopwatch import JsonFormatter

LOG_LEVELS = ("debug", "info", "warning", "error")

log = logging.getLogger("tfgm_dist")


def _config(args: argparse.Namespace) -> Config:
    """The config file with the command line's settings on top."""
    cfg = load_config(args.config)
    given = vars(args)
    overrides = {"top_k": args.top_k, "refine.enabled": args.refine, "assign.method": args.assign,
                 "seed": args.seed, "job.out": args.out,
                 "job.overwrite": args.overwrite or None, "ray.partitions": args.partitions,
                 "ray.address": args.ray_address, "assign.min_confidence": args.min_confidence,
                 "job.out_format": args.out_format, "job.run_date": args.run_date}
    for name in ("source", "target", "format", "columns", "seeds", "gold", "candidates",
                 "queries"):
        overrides[f"job.{name}"] = given.get(name)
    overrides.update(setting(text) for text in args.set or ())
    return with_overrides(cfg, **{k: v for k, v in overrides.items() if v is not None})


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="output folder (matches/, metrics.json, manifest.json), or "
                   "with --out-format delta a Delta Lake table")
    p.add_argument("--config", help="TOML or YAML file with any of the settings")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any setting, over the config file and the other flags (repeatable): "
                   "--set search.k=20 --set refine.enabled=true")
    p.add_argument("--top-k", type=int, help="rows written per source (default 1)")
    p.add_argument("--refine", action=argparse.BooleanOptionalAction, default=None,
                   help="training-free consensus refinement (default: chosen from the "
                   "input, on up to 200,000 nodes)")
    p.add_argument("--assign", choices=ASSIGN_METHODS,
                   help="decoding (default: chosen from the input, one-to-one unless sources "
                   "far outnumber the targets or the held-out seeds decode better otherwise)")
    p.add_argument("--min-confidence", type=float, metavar="C",
                   help="write only sources whose match has confidence >= C, in [0, 1]")
    p.add_argument("--seed", type=int, help="random seed (default 0)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an output folder that holds a previous run")
    p.add_argument("--out-format", choices=OUT_FORMATS,
                   help="parquet (default): OUT is this run's folder; delta: OUT is a Delta Lake "
                   "table (path or s3://, gs://, abfss:// URI) that receives the run as the "
                   "partition of its --run-date, replacing an earlier run of that date")
    p.add_argument("--run-date", metavar="YYYY-MM-DD",
                   help="the run's date in a Delta table (default: today, UTC)")
    p.add_argument("--partitions", type=int, help="run on Ray with P parts: P actors, each "
                   "holding 1/P of what is searched (align: also 1/P of each graph to embed; "
                   "align-supervised: of the collection's labelled nodes); default: one "
                   "process, no Ray")
    p.add_argument("--ray-address", help="Ray cluster to join (default: RAY_ADDRESS, else a "
                   "local cluster started in-process)")


def logging_options(p: argparse.ArgumentParser) -> None:
    """``-q``, ``-v``, ``--log-level`` and ``--log-format``: of this command line and of the
    Ray entrypoint ``jobs.align``; :func:`start_logging` applies them."""
    p.add_argument("-q", "--quiet", action="store_true",
                   help="warnings and errors only on stderr (= --log-level warning)")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="debug messages too (= --log-level debug)")
    p.add_argument("--log-level", choices=LOG_LEVELS, help="default info (progress included)")
    p.add_argument("--log-format", choices=("text", "json"), default="text",
                   help="json: one JSON object per line (time, level, logger, message), for "
                   "log collectors; no progress bars")


def start_logging(args: argparse.Namespace) -> None:
    """Log to stderr at the level and in the format :func:`logging_options` parsed."""
    level = args.log_level or ("debug" if args.verbose else "warning" if args.quiet else "info")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if args.log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tfgm-dist", description=__doc__.splitlines()[0])
    logging_options(p)
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    a = sub.add_parser("align", help="align SOURCE with TARGET")
    a.add_argument("source", nargs="?", help="graph file or Parquet-layout folder "
                   "(default: job.source of the config)")
    a.add_argument("target", nargs="?", help="graph file or Parquet-layout folder "
                   "(default: job.target of the config)")
    a.add_argument("--format", choices=("edgelist", "triples", "gw", "parquet"),
                   help="input format (default: from the extension)")
    a.add_argument("--columns", metavar="COLUMN=NAME,...", help="the Parquet layout's "
                   "columns under your names, e.g. src=follower,dst=followee,id=user_id")
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
    from .job import run_job
    from .synth import write_pair

    cfg = _config(args)
    out = cfg.job.out or "tfgm-demo-out"
    with tempfile.TemporaryDirectory(prefix="tfgm-demo-") as tmp:
        log.info("demo: writing a synthetic pair of %d nodes to %s", args.nodes, tmp)
        paths = write_pair(tmp, args.nodes, seed=cfg.seed)
        metrics = run_job(with_overrides(cfg, **{"job.source": str(paths["source"]),
                                                 "job.target": str(paths["target"]),
                                                 "job.gold": str(paths["gold"]),
                                                 "job.out": out}))
    log.info("results in %s/", out)
    return metrics


def _synth(args: argparse.Namespace) -> dict:
    from .synth import write_pair
    paths = write_pair(args.out, args.nodes, seed=args.seed, mean_degree=args.mean_degree,
                       edge_noise=args.edge_noise, feature_dim=args.feature_dim,
                       feature_noise=args.feature_noise)
    return {k: str(v) for k, v in paths.items()}


def outcome(work: Callable[[], dict]) -> int:
    """Run ``work`` and print what it returns as one JSON document (exit 0), or one
    ``error:`` line on stderr and no traceback: exit 2 for bad input, 1 for what the
    machine refused (a read-only or full disk, memory), 130 for Ctrl-C."""
    try:
        done = work()
    except InputError as e:
        return _failed(str(e), 2)
    except JobError as e:
        return _failed(str(e), 1)
    except KeyboardInterrupt:
        return _failed("interrupted (Ctrl-C); nothing was written", 130)
    except OSError as e:
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        return _failed(f"{where}{e.strerror or e}", 1)
    except MemoryError:
        return _failed("out of memory", 1)
    print(json.dumps(done, indent=2))
    return 0


def _failed(message: str, status: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)  # before the heavy imports: --help answers at once
    try:
        from .job import run_job
    except ImportError as e:
        if e.name != "faiss":
            raise
        return _failed("FAISS is not installed: pip install faiss-cpu (or faiss-gpu on a "
                       "CUDA 12 host)", 1)
    start_logging(args)
    commands = {"synth": lambda: _synth(args), "demo": lambda: _demo(args),
                "align-supervised": lambda: run_job(_config(args), collection=args.collection),
                "align": lambda: run_job(_config(args))}
    return outcome(commands[args.command])


if __name__ == "__main__":
    sys.exit(main())
