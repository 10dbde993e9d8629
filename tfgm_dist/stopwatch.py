"""Instrumentation: seconds and peak memory per stage, and the failpoint of the fault tests."""
from __future__ import annotations

import logging
import os
import resource
import signal
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

log = logging.getLogger("tfgm_dist")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process and its waited-for children (Linux: KiB units)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(own, children) * 1024


@dataclass
class Stopwatch:
    """Seconds per stage, logged as each stage ends.

    ``TFGM_FAILPOINT=<stage>`` kills this process (SIGKILL) as that stage starts: the fault
    tests use it to crash a run at a chosen point, as an OOM kill or a lost node would.
    """

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        if os.environ.get("TFGM_FAILPOINT") == name:
            os.kill(os.getpid(), signal.SIGKILL)
        log.info("%s ...", name)
        start = time.perf_counter()
        yield
        took = time.perf_counter() - start
        self.seconds[name] = self.seconds.get(name, 0.0) + took
        log.info("%s done in %.2f s (peak RSS %.0f MiB)", name, took, peak_rss_bytes() / 2**20)
