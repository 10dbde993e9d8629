"""GPU benchmark: one process on a CUDA GPU against the same process on its host's CPUs.

    python -m jobs.bench_gpu                                   # 100k and 300k, cpu and cuda
    python -m jobs.bench_gpu --sizes 300000,1000000 --runs cuda,cuda-exact
    python -m jobs.bench_gpu --sizes 100000 --runs cuda        # a quick look
    python -m jobs.bench_gpu --sizes 300000 --runs cuda,ray    # one part actor on the GPU

For each size ``tfgm-dist synth`` writes the pair (seed 0, as ``jobs.bench_scale``), and each
run is the real command ``tfgm-dist align SOURCE TARGET --out OUT --gold GOLD`` in a new
process with no config file, only the device set (``cpu`` or ``cuda``): the job chooses the
same settings on both, and on the GPU embeds, and where the search is exact searches and
refines, there. ``cuda-exact`` also sets an exact search with refinement, as the job
chooses up to ``auto.EXACT_MAX_NODES``, at any size: whether a GPU should search exactly
above it is that row against the ``cuda`` one. ``ray`` runs the pair on a fresh local Ray
cluster with one part (``--partitions 1``), whose actor takes the GPU where the cluster has
one: the distributed code path against the ``cuda`` row's one process. Prints the host's
and the GPU's copy bandwidth and float32 GEMM rate (:func:`jobs.bench_scale.machine_bounds`),
then one Markdown table: seconds per stage, Hits@1, one-to-one accuracy, peak RSS and peak
GPU memory. Each run's metrics are also kept under ``--keep`` when given.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from jobs import warn_uncompiled
from jobs.bench_engine import run_cli
from jobs.bench_scale import machine_bounds

RUNS = {"cpu": ["--set", "device=cpu"], "cuda": ["--set", "device=cuda"],
        "cuda-exact": ["--set", "device=cuda", "--set", "search.index=flat", "--set",
                       "search.k=50", "--set", "refine.enabled=true"],
        "ray": ["--partitions", "1"]}
STAGES = ("load", "features", "embed", "search", "refine", "assign", "write")


def settings(out: Path, m: dict) -> str:
    """The search and refinement a run had: chosen by the job, else as set (the manifest's
    config is the one given)."""
    given = json.loads((out / "manifest.json").read_text())["config"]

    def value(key: str):
        section, name = key.split(".")
        return m["auto"]["chosen"].get(key, given[section][name])
    on = f", Ray actor on {m['ray']['device']}" if "ray" in m else ""
    return (f"{value('search.index')}, k {value('search.k')}, "
            f"refined {value('refine.enabled')}{on}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="100000,300000")
    p.add_argument("--runs", default="cpu,cuda", help=f"of {', '.join(RUNS)}")
    p.add_argument("--keep", help="copy each run's metrics.json into this folder")
    args = p.parse_args()
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"machine: {os.cpu_count()} cores, {gpu}, torch {torch.__version__}")
    for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
        b = machine_bounds(device)
        print(f"{device}: copy {b['bandwidth'] / 1e9:,.0f} GB/s, float32 GEMM "
              f"{b['gemm'] / 1e12:,.2f} TFLOP/s")
    print()
    warn_uncompiled()
    print(f"| nodes | run | wall s | {' | '.join(STAGES)} | Hits@1 | one-to-one acc "
          "| search, refined | peak RSS GiB | peak GPU GiB |")
    print("|---|---|---|" + "---|" * len(STAGES) + "---|---|---|---|---|", flush=True)
    with tempfile.TemporaryDirectory(prefix="tfgm-gpu-") as tmp:
        for n in (int(x) for x in args.sizes.split(",")):
            folder = Path(tmp) / f"synth-{n}"
            subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "synth", str(folder),
                            "--nodes", str(n)], check=True, stdout=subprocess.DEVNULL)
            for run in args.runs.split(","):
                out = Path(tmp) / f"out-{n}-{run}"
                wall, m = run_cli([str(folder / "source"), str(folder / "target"), "--out",
                                   str(out), "--gold", str(folder / "gold.parquet"),
                                   *RUNS[run]])
                if args.keep:
                    Path(args.keep).mkdir(parents=True, exist_ok=True)
                    shutil.copy(out / "metrics.json", Path(args.keep) / f"{n}-{run}.json")
                sec = " | ".join(f"{m['seconds'].get(s, 0.0):.1f}" for s in STAGES)
                print(f"| {n:,} | {run} | {wall:.1f} | {sec} | {100 * m['hits@1']:.2f} "
                      f"| {100 * m['accuracy']:.2f} "
                      f"| {settings(out, m)} "
                      f"| {m['peak_rss_bytes'] / 2**30:.2f} "
                      f"| {m.get('peak_gpu_bytes', 0) / 2**30:.2f} |", flush=True)
                shutil.rmtree(out)


if __name__ == "__main__":
    main()
