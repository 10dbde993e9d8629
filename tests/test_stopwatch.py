"""Instrumentation: progress lines with a time left, and the JSON log format."""
import json
import logging
import re
import subprocess
import sys

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


def test_the_command_line_logs_json_or_nothing_below_its_level(tmp_path):
    def demo(*options: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tfgm_dist.cli", *options, "demo",
                               "--nodes", "500", "--out", str(tmp_path / options[-1])],
                              capture_output=True, text=True, timeout=300)

    logged = demo("--log-format", "json")
    assert logged.returncode == 0, logged.stderr
    entries = [json.loads(line) for line in logged.stderr.splitlines()]
    assert entries and {e["level"] for e in entries} == {"INFO"}
    assert any(e["message"].startswith("embed done") for e in entries)
    assert json.loads(logged.stdout)["rows"] == 500  # stdout stays one JSON document
    quiet = demo("--log-level", "warning")
    assert quiet.returncode == 0 and quiet.stderr == ""
