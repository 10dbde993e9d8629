"""Instrumentation: progress lines with a time left, and the JSON log format."""
import json
import logging
import re
import subprocess
import sys

import pytest

from tfgm_dist import cli
from tfgm_dist.stopwatch import JsonFormatter, Progress


def test_progress_logs_the_share_done_and_the_time_left(caplog):
    caplog.set_level(logging.INFO, logger="tfgm_dist")
    meter = Progress("search", 4, "queries", every=0.0)
    for _ in range(4):
        meter.advance()
    lines = [r.getMessage() for r in caplog.records]
    assert [re.sub(r"\(ETA .*\)", "(ETA)", line) for line in lines[:3]] == [
        "search: 25 % (ETA)", "search: 50 % (ETA)", "search: 75 % (ETA)"]
    assert re.fullmatch(r"search: 100 % in \d+s", lines[3])


def test_quick_work_logs_no_progress_line(caplog):
    caplog.set_level(logging.INFO, logger="tfgm_dist")
    meter = Progress("refine", 10, "steps", every=3600.0)
    for _ in range(10):
        meter.advance()
    assert caplog.records == []


def test_eta_is_read_in_minutes_and_hours():
    meter = Progress("embed", 100)
    meter.done = 25
    assert meter.line(meter.start + 50.0) == "embed: 25 % (ETA 2m30s)"
    assert meter.line(meter.start + 1800.0) == "embed: 25 % (ETA 1h30m)"


def test_json_log_lines_carry_time_level_logger_message():
    record = logging.LogRecord("tfgm_dist.job", logging.WARNING, __file__, 1, "lost %d", (3,),
                               None)
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "WARNING" and entry["logger"] == "tfgm_dist.job"
    assert entry["message"] == "lost 3" and entry["time"].endswith("Z")


def test_the_command_line_logs_json_lines_and_keeps_stdout_one_document(tmp_path):
    logged = subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "--log-format", "json",
                             "demo", "--nodes", "500", "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300)
    assert logged.returncode == 0, logged.stderr
    entries = [json.loads(line) for line in logged.stderr.splitlines()]
    assert entries and {e["level"] for e in entries} == {"INFO"}
    assert any(e["message"].startswith("embed done") for e in entries)
    assert json.loads(logged.stdout)["rows"] == 500


@pytest.mark.parametrize("options, level", [([], "INFO"), (["-q"], "WARNING"),
                                            (["-v"], "DEBUG"), (["--log-level", "error"], "ERROR")])
def test_log_levels_from_the_options(monkeypatch, options, level):
    monkeypatch.setattr(logging.root, "handlers", [])  # as in a fresh process
    monkeypatch.setattr(logging.root, "level", logging.WARNING)
    cli.start_logging(cli.parser().parse_args([*options, "synth", "out"]))
    assert logging.getLevelName(logging.root.level) == level
    assert not isinstance(logging.root.handlers[0].formatter, JsonFormatter)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_process_started_by_a_large_one_reports_its_own_peak():
    """Linux keeps ``ru_maxrss`` across ``execve``: a job started by a process holding
    512 MiB reported 512 MiB. Its own peak is its own."""
    code = ("import numpy as np, subprocess, sys; block = np.ones(512 * 2**20 // 8); "
            "print(block.sum() > 0 and subprocess.run([sys.executable, '-c', "
            "'from tfgm_dist.stopwatch import peak_rss_bytes; print(peak_rss_bytes())'], "
            "capture_output=True, text=True, check=True).stdout)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert 0 < int(out) < 256 * 2**20  # the child imported numpy at most: not the 512 MiB


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_private_memory_grows_with_what_this_process_allocates():
    # a fresh process: a long one (the whole suite) can serve the block from pages it freed
    # earlier and still holds, and then its private memory does not move
    code = ("import numpy as np; from tfgm_dist.stopwatch import private_rss_bytes; "
            "before = private_rss_bytes(); block = np.ones(64 * 2**20 // 8); "
            "print(block.sum() > 0 and private_rss_bytes() - before >= 60 * 2**20)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "True"  # 64 MiB of the process's own pages, touched
