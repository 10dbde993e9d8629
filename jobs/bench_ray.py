"""Benchmark the Ray pipeline against the single-process run, on this machine.

    python -m jobs.bench_ray                                  # DBP15k + synthetic 100k and 1M
    python -m jobs.bench_ray --only synth --sizes 100000 --partitions 1,2,4
    python -m jobs.bench_ray --only dbp15k --pairs zh_en
    python -m jobs.bench_ray --only synth --sizes 1000000 --partitions ""   # one process only

Every run is the real command, ``tfgm-dist align [--partitions P]``, in a new process that
starts its own local Ray cluster (the start is part of the wall time, as it is for a user).
Prints one Markdown table per input: wall seconds, seconds per stage, Hits@1, the peak RSS
of the driver and of the largest Ray process, their sum over all Ray processes, and the
overhead against the single-process run.

- DBP15k: the protocol of ``bench_engine`` (seeds, refinement, ranked against the test
  targets), config ``jobs/configs/dbp15k.toml``.
- Synthetic: ``tfgm-dist synth`` pairs (power-law degrees, mean degree 10, 5 % edge noise,
  128-wide noisy features), embedded with L = 2, searched with FAISS IVF (k = 10), decoded by
  argmax: ``jobs/configs/synthetic.toml``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from jobs.bench_engine import CONFIGS, DATA, prepare_dbp, run_cli

STAGES = ("load", "features", "partition", "embed", "search", "refine+assign", "refine",
          "assign", "write")


def _row(label: str, wall: float, m: dict, base: float | None) -> str:
    seconds = " ".join(f"{k} {m['seconds'][k]:.1f}" for k in STAGES if k in m["seconds"])
    procs = m.get("ray", {}).get("processes", [])
    largest = max((p["peak_rss_bytes"] for p in procs), default=0)
    total = m["peak_rss_bytes"] + sum(p["peak_rss_bytes"] for p in procs)
    over = "-" if base is None else f"{wall - base:+.1f} s ({wall / base:.2f}x)"
    return (f"| {label} | {wall:.1f} | {over} | {seconds} | {100 * m['hits@1']:.1f} | "
            f"{m['peak_rss_bytes'] / 2**30:.2f} | {largest / 2**30:.2f} | {total / 2**30:.2f} |")


def _table(title: str, args: list[str], partitions: list[int], out: Path) -> None:
    print(f"\n### {title}\n")
    print("| run | wall s | overhead vs 1 process | seconds per stage | Hits@1 | driver GiB "
          "| largest Ray process GiB | all processes GiB |")
    print("|---|---|---|---|---|---|---|---|")
    base = None
    for p in [0, *partitions]:
        extra = ["--partitions", str(p)] if p else []
        wall, m = run_cli([*args, "--out", str(out / f"p{p}"), *extra])
        print(_row("1 process" if p == 0 else f"Ray, P = {p}", wall, m, base), flush=True)
        base = base or wall


def bench_dbp(pairs: list[str], partitions: list[int]) -> None:
    for pair in pairs:
        with tempfile.TemporaryDirectory() as tmp:
            p = prepare_dbp(pair, Path(tmp) / "in")
            _table(f"DBP15k {pair} (seeds, refinement, jobs/configs/dbp15k.toml)",
                   [str(p["source"]), str(p["target"]), "--config",
                    str(CONFIGS / "dbp15k.toml"), "--seeds", str(p["seeds"]), "--gold",
                    str(p["gold"]), "--candidates", str(p["candidates"]), "--queries",
                    str(p["queries"])], partitions, Path(tmp))


def bench_synth(sizes: list[int], partitions: list[int]) -> None:
    for n in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "synth",
                            f"{tmp}/in", "--nodes", str(n)], check=True,
                           stdout=subprocess.DEVNULL)
            _table(f"Synthetic pair, {n:,} nodes each (jobs/configs/synthetic.toml)",
                   [f"{tmp}/in/source", f"{tmp}/in/target", "--gold", f"{tmp}/in/gold.parquet",
                    "--config", str(CONFIGS / "synthetic.toml")], partitions, Path(tmp))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("dbp15k", "synth"))
    p.add_argument("--pairs", default="zh_en,ja_en,fr_en")
    p.add_argument("--sizes", default="100000,1000000")
    p.add_argument("--partitions", default="1,2,4")
    args = p.parse_args()
    partitions = [int(x) for x in args.partitions.split(",") if x]  # "": one process only
    print(f"machine: {os.cpu_count()} cores, torch threads "
          f"{os.environ.get('OMP_NUM_THREADS', 'default')}")
    if args.only in (None, "dbp15k"):
        if not DATA.exists():
            sys.exit(f"benchmark data not found at {DATA}")
        bench_dbp(args.pairs.split(","), partitions)
    if args.only in (None, "synth"):
        bench_synth([int(x) for x in args.sizes.split(",")], partitions)


if __name__ == "__main__":
    main()
