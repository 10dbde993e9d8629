"""The Ray job entrypoint: ``python -m jobs.align CONFIG``, what ``ray job submit`` runs.

CONFIG is the command line's config file (TOML or YAML) with a ``[job]`` section naming the
inputs and the output, and a ``[ray]`` section. It runs the job (:func:`tfgm_dist.job.run_job`)
on the cluster the job was submitted to (``RAY_ADDRESS``), or on ``ray.address``, or on a
local cluster started in-process. ``ray.partitions = 0`` picks one partition per GPU, else
one per two CPUs of the cluster.

    ray job submit --address http://127.0.0.1:8265 --working-dir . -- \\
        python -m jobs.align jobs/configs/yeast-job.toml [--set job.run_date=... --set KEY=VALUE]
"""
from __future__ import annotations

import argparse
import sys

from tfgm_dist.cli import logging_options, outcome, start_logging
from tfgm_dist.config import load_config, setting, with_overrides
from tfgm_dist.job import run_job


def partitions(configured: int, address: str) -> int:
    """``configured``, or for 0 one per GPU of the cluster, else one per two CPUs."""
    if configured:
        return configured
    import ray

    from tfgm_dist.distributed import connect
    connect(address)
    total = ray.cluster_resources()
    return int(total.get("GPU", 0)) or max(1, int(total.get("CPU", 1)) // 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m jobs.align", description=__doc__.splitlines()[0])
    p.add_argument("config", help="TOML or YAML job config with [job] and [ray] sections")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", default=[],
                   help="override a setting of CONFIG without editing it (repeatable): "
                   "--set job.run_date=2026-11-23 --set search.k=20")
    logging_options(p)
    args = p.parse_args(argv)
    start_logging(args)

    def work() -> dict:
        cfg = with_overrides(load_config(args.config), **dict(map(setting, args.set)))
        parts = partitions(cfg.ray.partitions, cfg.ray.address)
        return run_job(with_overrides(cfg, **{"ray.partitions": parts}))
    return outcome(work)


if __name__ == "__main__":
    sys.exit(main())
