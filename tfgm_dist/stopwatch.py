"""Instrumentation: seconds and peak memory per stage, progress with a time left, the JSON
log format, and the failpoint of the fault tests."""
from __future__ import annotations

import json
import logging
import os
import resource
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

log = logging.getLogger("tfgm_dist")


def peak_rss_bytes() -> int:
    """Peak resident memory of this process and its waited-for children.

    This process's own is ``VmHWM`` of ``/proc/self/status`` where there is one, not
    ``ru_maxrss``: Linux keeps that across ``execve``, so a job started by a large process
    reported the starter's size (the 1M pair's driver, started by ``jobs.bench_scale``
    after it had measured the machine's bandwidth: 1.52 GiB against its own 0.86)."""
    own = _status_bytes("VmHWM:")
    if own is None:
        own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB units
    return max(own, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)


def peak_gpu_bytes() -> int | None:
    """Peak memory torch allocated on its current CUDA GPU, ``None`` where this process
    never used one (torch is imported here only where it already was)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return int(torch.cuda.max_memory_allocated())


def private_rss_bytes() -> int | None:
    """This process's resident memory of its own (``RssAnon`` of ``/proc/self/status``):
    not the shared pages of Ray's object store it read or wrote, which the resident set
    counts in every process that touched them (a part actor of the 1M pair at P = 4: 1.3 GiB
    its own, 3.1-3.8 GiB more of the store). ``None`` where ``/proc`` has no such line."""
    return _status_bytes("RssAnon:")


def _status_bytes(key: str) -> int | None:
    """The value of line ``key`` of ``/proc/self/status`` (KiB there), in bytes; ``None``
    where there is no such line or file."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


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


class Progress:
    """How much of one stage's work is done, and the time left at the rate so far.

    On a terminal (stderr a TTY, INFO logged as text) a tqdm bar; otherwise, as in a Ray job's
    log or a scheduler's, the line ``stage: 37 % (ETA 2m10s)`` at most every ``every`` seconds,
    and at the end when a line was logged before (work done within ``every`` seconds logs
    nothing: the stage's own "done" line says it). Advance it as work completes, not as it is
    submitted.
    """

    def __init__(self, stage: str, total: int, unit: str = "", every: float = 10.0) -> None:
        self.stage, self.total, self.unit, self.every = stage, max(0, total), unit, every
        self.done, self.start = 0, time.perf_counter()
        self.last = self.start
        self.bar = None
        if self.total and sys.stderr.isatty() and log.isEnabledFor(logging.INFO) and not any(
                isinstance(h.formatter, JsonFormatter) for h in logging.getLogger().handlers):
            from tqdm import tqdm
            self.bar = tqdm(total=self.total, desc=stage, unit=unit or "it", leave=False,
                            file=sys.stderr)

    def advance(self, n: int = 1) -> None:
        self.done = min(self.total, self.done + n)
        if self.bar is not None:
            self.bar.update(n)
            if self.done == self.total:
                self.bar.close()
            return
        now = time.perf_counter()
        if now - self.last >= self.every or self.done == self.total and self.last > self.start:
            self.last = now
            log.info("%s", self.line(now))

    def line(self, now: float | None = None) -> str:
        """``stage: 37 % (ETA 2m10s)``; the ETA from the rate since the start."""
        now = time.perf_counter() if now is None else now
        share = self.done / self.total if self.total else 1.0
        took = now - self.start
        if share >= 1.0:
            return f"{self.stage}: 100 % in {_duration(took)}"
        eta = _duration(took * (1 - share) / share) if share > 0 else "?"
        return f"{self.stage}: {100 * share:.0f} % (ETA {eta})"


def _duration(seconds: float) -> str:
    minutes, sec = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{sec:02d}s" if minutes else f"{sec}s"


class JsonFormatter(logging.Formatter):
    """One JSON object per log record (``--log-format json``), for log collectors: time (UTC,
    ISO 8601), level, logger, message, and the exception when there is one. The standard
    library has no JSON formatter, and this is all a collector needs."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
                 + f".{int(record.msecs):03d}Z",
                 "level": record.levelname, "logger": record.name,
                 "message": record.getMessage()}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)
