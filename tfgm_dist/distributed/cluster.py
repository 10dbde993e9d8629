"""The Ray cluster: join one (or start a fresh one in-process), and size the actors to it."""
from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import ray
from ray._private import ray_constants

from ..errors import InputError

log = logging.getLogger("tfgm_dist")

CONNECT_TIMEOUT_S = 60.0  # an address that does not answer within this is an error
WARM_WORKERS = 2  # idle workers an in-process cluster keeps beyond one a core
RESTART_HEADROOM = 0.5  # share of an actor's threads reserved as Ray CPUs


def connect(address: str = "") -> None:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``); else start a fresh one
    in-process.

    A fresh one, always: ``address="local"`` ignores the address file a dead head may have
    left in Ray's temp folder (joining it hangs forever). A given address must answer within
    :data:`CONNECT_TIMEOUT_S` (Ray itself retries forever), or this raises an
    :class:`InputError` naming it. An in-process cluster binds to loopback and runs no
    dashboard.
    """
    if ray.is_initialized():
        return
    address = address or os.environ.get("RAY_ADDRESS", "")
    if address and address != "local":
        if address != "auto":
            _answers(address)
        log.info("ray: joining the cluster at %s", address)
        ray.init(address=address, log_to_driver=True, logging_level=_ray_level())
    else:
        log.info("ray: starting a local cluster on 127.0.0.1")
        # On Linux, Ray binds its servers to every interface even with a loopback node
        # address; its single-machine mode (the Windows/macOS default) keeps them on loopback.
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
        # Ray keeps as many idle workers as the node has cores; a run's part actors take
        # them, and the next run's tasks or actors start cold processes (torch imported
        # again). Two more kept: yeast on Ray at P = 2, runs after the first 4.2 s -> 3.5 s.
        # Ray 2.60 turns token authentication on for a new local cluster and warns that it
        # did, on stderr beside a bad input's one-line error: on, quietly
        notice = logging.getLogger("ray._private.authentication.authentication_token_setup")
        level = notice.level
        notice.setLevel(logging.ERROR)
        try:
            ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                     log_to_driver=True, logging_level=_ray_level(), _system_config={
                         "num_workers_soft_limit": (os.cpu_count() or 1) + WARM_WORKERS})
        finally:
            notice.setLevel(level)


def _ray_level() -> int:
    """The level of Ray's own log in this process: its warnings, or less where the job
    logs less (``-q``), its start-up lines too where the job logs its debugging (``-v``);
    otherwise this module says what those lines did."""
    level = log.getEffectiveLevel()
    return logging.INFO if level < logging.INFO else max(logging.WARNING, level)


def _answers(address: str) -> None:
    """Raise :class:`InputError` unless a TCP connection to ``address`` (``host:port``, with
    or without a ``ray://`` or ``http://`` scheme) opens within :data:`CONNECT_TIMEOUT_S`."""
    where = address.split("://", 1)[-1].rstrip("/")
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"ray address {address!r}: expected HOST:PORT")
    timeout_s = CONNECT_TIMEOUT_S
    deadline, error = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, int(port)), timeout=5).close()
            return
        except OSError as e:
            error = e
            time.sleep(1.0)
    raise InputError(f"ray address {address}: nothing answered at {host}:{port} within "
                     f"{timeout_s:g} s ({error})")


def resources() -> tuple[float, float]:
    """CPUs and GPUs of the cluster."""
    total = ray.cluster_resources()
    return float(total.get("CPU", 1)), float(total.get("GPU", 0))


def placement(cpus: float, gpus: float, partitions: int) -> tuple[str, float, dict[str, Any]]:
    """Where the ``partitions`` part actors of a cluster with ``cpus`` and ``gpus`` run: their
    torch device, the threads each runs, and the Ray options each asks for.

    With GPUs, each actor takes ``gpus / partitions`` of them (one each when ``partitions``
    equals the GPU count, as ``jobs.align`` chooses) and its tensors and FAISS index live on
    the GPU. Without, each runs ``cpus / partitions`` threads and reserves half of them as Ray
    CPUs, so that the actors of a lost node can be restarted on the nodes that are left.
    Actors are spread over the nodes either way.
    """
    threads = cpus / partitions
    if gpus:
        return "cuda", threads, {"scheduling_strategy": "SPREAD", "num_cpus": 0,
                                 "num_gpus": gpus / partitions}
    return "cpu", threads, {"scheduling_strategy": "SPREAD",
                            "num_cpus": threads * RESTART_HEADROOM}


def fitted_memory(estimate: int, count: int, nodes: list[float]) -> int:
    """The memory each of ``count`` actors declares to Ray: ``estimate`` bytes, or less where
    the nodes (``nodes``: each one's Ray ``memory`` resource) cannot place ``count`` actors
    of that size at once, the most that they can. Ray leaves an actor that does not fit
    pending until another ends, and the run's actors all wait for each other: the 3M pair
    at P = 4 on this 24 GiB machine declared 7.2 GB each against 17.3 GB and hung with two
    started. The declaration only steers where Ray places them; a part needs what it
    needs, so a lower one is logged as a warning."""
    whole = [int(m) for m in nodes]
    if placed(max(1, estimate), nodes) >= count:
        return estimate
    fits = max((m // j for m in whole for j in range(1, count + 1)
                if m >= j and placed(m // j, nodes) >= count), default=0)
    log.warning("ray: each of the %d part actors may need %.1f GiB, but the cluster's nodes "
                "(%s GiB) can hold %d at once of at most %.1f GiB: declared so; add memory or "
                "nodes if a part runs out", count, estimate / 2**30,
                ", ".join(f"{m / 2**30:.1f}" for m in nodes), count, fits / 2**30)
    return fits


def placed(size: int, nodes: list[float]) -> int:
    """How many actors of ``size`` bytes the nodes (each one's Ray ``memory``) hold at once."""
    return sum(int(m) // max(1, size) for m in nodes)


def node_memory() -> list[float]:
    """Each live node's Ray ``memory`` resource, in bytes."""
    return [n["Resources"].get("memory", 0.0) for n in ray.nodes() if n["Alive"]]

