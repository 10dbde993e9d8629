"""Delta Lake output: dated runs in one table, a rerun replacing its date, the run history in
the commits, refusals; read back with deltalake and polars."""
import json

import duckdb
import polars as pl
import pyarrow.dataset as ds
import pytest
from deltalake import DeltaTable

from tfgm_dist import cli
from tfgm_dist.config import Config, with_overrides
from tfgm_dist.job import run_job
from tfgm_dist.synth import write_pair
from tfgm_dist.write import RUN_METADATA


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return write_pair(tmp_path_factory.mktemp("pair"), 600, seed=3)


def job(pair, out, **job) -> Config:
    given = {"source": str(pair["source"]), "target": str(pair["target"]),
             "gold": str(pair["gold"]), "out": str(out), **job}
    settings = {f"job.{k}": v for k, v in given.items()}
    return with_overrides(Config(), **settings, **{"bootstrap.rounds": 0})


def runs_per_date(frame: pl.DataFrame) -> dict[str, list[str]]:
    per_date = frame.group_by("run_date").agg(pl.col("run_id").unique()).iter_rows()
    return {str(d): ids for d, ids in per_date}


def test_runs_append_by_date_and_a_rerun_replaces_only_its_date(pair, tmp_path):
    table = tmp_path / "lake" / "matches"
    table.parent.mkdir()
    first, second, third, rerun = (
        run_job(job(pair, table, out_format="delta", run_date=day))
        for day in ("2026-11-21", "2026-11-22", "2026-11-23", "2026-11-21"))
    assert [m["delta_version"] for m in (first, second, third, rerun)] == [0, 1, 2, 3]

    rows = pl.read_delta(str(table))
    assert rows.columns[:2] == ["run_id", "run_date"]
    assert runs_per_date(rows) == {"2026-11-21": [rerun["run_id"]],
                                   "2026-11-22": [second["run_id"]],
                                   "2026-11-23": [third["run_id"]]}
    assert rows.height == 3 * first["rows"]
    # DuckDB over the table's current version (its Arrow dataset), and time travel
    db = duckdb.connect()
    db.register("runs", DeltaTable(str(table)).to_pyarrow_dataset())
    assert db.sql("select count(distinct run_date), count(distinct run_id) from runs"
                  ).fetchall() == [(3, 3)]
    assert runs_per_date(pl.read_delta(str(table), version=1)) == {
        "2026-11-21": [first["run_id"]], "2026-11-22": [second["run_id"]]}

    # the same matches as the plain Parquet folder of the same job
    plain = tmp_path / "plain"
    run_job(job(pair, plain))
    want = pl.from_arrow(ds.dataset(plain / "matches").to_table().replace_schema_metadata(None))
    got = rows.filter(pl.col("run_id") == second["run_id"]).drop("run_id", "run_date")
    assert got.sort("source_id", "rank").equals(want.sort("source_id", "rank"))

    history = DeltaTable(str(table)).history()
    runs = [json.loads(h[RUN_METADATA]) for h in sorted(history, key=lambda h: h["version"])]
    assert [r["metrics"]["run_id"] for r in runs] == [
        m["run_id"] for m in (first, second, third, rerun)]
    assert runs[1]["metrics"]["hits@1"] == second["hits@1"]
    assert runs[1]["manifest"]["config"]["job"]["run_date"] == "2026-11-22"
    assert sorted(p.name for p in table.parent.iterdir()) == ["matches"]  # nothing staged left


def test_the_run_date_defaults_to_today_in_utc(pair, tmp_path):
    from datetime import datetime, timezone
    metrics = run_job(job(pair, tmp_path / "t", out_format="delta"))
    today = datetime.now(timezone.utc).date().isoformat()
    assert metrics["run_date"] == today
    dates = DeltaTable(str(tmp_path / "t")).to_pyarrow_table(columns=["run_date"])
    assert {str(d) for d in dates.column("run_date").to_pylist()} == {today}


@pytest.mark.parametrize("extra, message", [
    (["--run-date", "2026-02-30"], "job.run_date '2026-02-30' is not a date (YYYY-MM-DD)"),
    (["--overwrite"], "job.overwrite does not apply to out_format = \"delta\""),
    (["--out-format", "parquet", "--run-date", "2026-11-23"],
     "job.run_date applies to out_format = \"delta\" only"),
])
def test_bad_delta_options_are_one_error_line(pair, tmp_path, capsys, extra, message):
    code = cli.main(["-q", "align", str(pair["source"]), str(pair["target"]), "--out",
                     str(tmp_path / "t"), "--out-format", "delta", *extra])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: ") and message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "t").exists()


def test_a_folder_that_is_no_delta_table_is_refused(pair, tmp_path, capsys):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "notes.txt").write_text("mine")
    code = cli.main(["-q", "align", str(pair["source"]), str(pair["target"]), "--out",
                     str(tmp_path / "t"), "--out-format", "delta"])
    err = capsys.readouterr().err
    assert code == 2 and "is not empty and is not a Delta table" in err
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["notes.txt"]


def test_a_plain_output_folder_is_not_taken_for_a_delta_table(pair, tmp_path, capsys):
    run_job(job(pair, tmp_path / "t"))
    code = cli.main(["-q", "align", str(pair["source"]), str(pair["target"]), "--out",
                     str(tmp_path / "t"), "--out-format", "delta"])
    assert code == 2 and "is not a Delta table" in capsys.readouterr().err


KILLED_BEFORE_COMMIT = """
import os, signal, sys, threading, time
from pathlib import Path
import deltalake, pyarrow as pa
from tfgm_dist import cli

real = deltalake.write_deltalake


def killed_before_commit(table, data, **options):
    # the real writer; once it has taken every row, a thread watches the table and kills
    # the process (SIGKILL, no cleanup) as the run's data file appears: the transaction
    # log entry comes a few milliseconds later, so it is never written
    folder = Path(table)
    before = set(folder.rglob("*.parquet"))

    def watch():
        while set(folder.rglob("*.parquet")) == before:
            time.sleep(0.0002)
        os.kill(os.getpid(), signal.SIGKILL)

    def batches():
        yield from data
        threading.Thread(target=watch, daemon=True).start()
    return real(table, pa.RecordBatchReader.from_batches(data.schema, batches()), **options)


deltalake.write_deltalake = killed_before_commit
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_run_killed_while_writing_the_table_leaves_the_last_version(pair, tmp_path):
    """SIGKILL when the real Delta writer has written the run's data file and not yet
    committed: the table stays at its last version with that version's rows (readers see
    no part of the run), and the same date's rerun then commits over the debris.

    The kill races the commit by a few milliseconds; a try where the commit wins must still
    leave a whole run (a version more, the date holding one run of every row), and one of
    five tries must land before the commit (each does about four times in five here)."""
    import subprocess
    import sys
    table = tmp_path / "matches"
    first = run_job(job(pair, table, out_format="delta", run_date="2026-11-21"))
    args = ["-q", "align", str(pair["source"]), str(pair["target"]), "--out", str(table),
            "--out-format", "delta", "--run-date", "2026-11-21", "--set", "bootstrap.rounds=0"]
    for _ in range(5):
        version, rows = DeltaTable(str(table)).version(), pl.read_delta(str(table))
        files = set(table.rglob("*.parquet"))
        died = subprocess.run([sys.executable, "-c", KILLED_BEFORE_COMMIT, *args],
                              capture_output=True, timeout=300)
        assert died.returncode == -9, died.stderr.decode()[-2000:]
        assert len(set(table.rglob("*.parquet")) - files) == 1  # the killed run's data file
        now = pl.read_delta(str(table))
        if DeltaTable(str(table)).version() == version:
            assert now.equals(rows)  # no part of the killed run is read
            break
        assert DeltaTable(str(table)).version() == version + 1  # the commit won: whole
        assert now.height == first["rows"] and len(runs_per_date(now)["2026-11-21"]) == 1
    else:
        pytest.fail("in five tries the kill never landed between the data file and the commit")
    rerun = run_job(job(pair, table, out_format="delta", run_date="2026-11-21"))
    assert rerun["delta_version"] == version + 1
    assert runs_per_date(pl.read_delta(str(table))) == {"2026-11-21": [rerun["run_id"]]}


class ObjectStore:
    """A real S3 API (moto's server, in a thread of this process) that can SIGKILL a writer
    the moment it starts its commit: the first request that writes under ``_delta_log/``
    while ``kill_at_commit`` holds a process kills it and is answered with an error, so the
    commit never lands. The environment in :attr:`env` points S3 clients at it."""

    def __init__(self) -> None:
        import threading

        from moto.server import DomainDispatcherApplication, create_backend_app
        from werkzeug.serving import make_server
        self.app = DomainDispatcherApplication(create_backend_app)
        self.kill_at_commit = None
        self.killed_at: str | None = None
        self.server = make_server("127.0.0.1", 0, self, threaded=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        host, port = self.server.server_address[:2]
        self.env = {"AWS_ENDPOINT_URL": f"http://{host}:{port}", "AWS_ALLOW_HTTP": "true",
                    "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                    "AWS_REGION": "us-east-1", "AWS_DEFAULT_REGION": "us-east-1"}

    def __call__(self, environ, start_response):
        import signal
        writes = environ["REQUEST_METHOD"] in ("PUT", "POST")
        if writes and "/_delta_log/" in environ["PATH_INFO"] and self.kill_at_commit:
            self.kill_at_commit.send_signal(signal.SIGKILL)
            self.kill_at_commit.wait()
            self.killed_at, self.kill_at_commit = environ["PATH_INFO"], None
            start_response("503 Service Unavailable", [("Content-Length", "0")])
            return [b""]
        return self.app(environ, start_response)

    def objects(self, prefix: str) -> set[str]:
        import boto3
        s3 = boto3.client("s3", endpoint_url=self.env["AWS_ENDPOINT_URL"])
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket="lake", Prefix=prefix)
        return {o["Key"] for page in pages for o in page.get("Contents", [])}

    def close(self) -> None:
        self.server.shutdown()


def test_a_run_killed_in_its_commit_to_an_object_store_leaves_the_last_version(
        pair, tmp_path, monkeypatch):
    """The table on an S3 bucket (moto's server): a run SIGKILLed as it starts writing its
    commit leaves its data files as debris, which no reader sees; the table stays at its
    last version, and the same date's rerun commits."""
    import os
    import subprocess
    import sys

    import boto3
    store = ObjectStore()
    try:
        for key, value in store.env.items():
            monkeypatch.setenv(key, value)
        boto3.client("s3", endpoint_url=store.env["AWS_ENDPOINT_URL"]).create_bucket(
            Bucket="lake")
        table = "s3://lake/matches"
        first = run_job(job(pair, table, out_format="delta", run_date="2026-11-21"))
        second = run_job(job(pair, table, out_format="delta", run_date="2026-11-22"))
        before, files = pl.read_delta(table), store.objects("matches/")
        assert DeltaTable(table).version() == 1

        store.kill_at_commit = subprocess.Popen(
            [sys.executable, "-m", "tfgm_dist.cli", "-q", "align", str(pair["source"]),
             str(pair["target"]), "--out", table, "--out-format", "delta", "--run-date",
             "2026-11-21", "--set", "bootstrap.rounds=0"],
            env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        died = store.kill_at_commit.wait(timeout=300)
        assert died == -9 and store.killed_at is not None
        debris = store.objects("matches/") - files
        assert debris and all(k.endswith(".parquet") for k in debris)  # data, no log entry
        assert DeltaTable(table).version() == 1
        assert pl.read_delta(table).equals(before)  # no part of the killed run is read

        rerun = run_job(job(pair, table, out_format="delta", run_date="2026-11-21"))
        assert rerun["delta_version"] == 2
        assert runs_per_date(pl.read_delta(table)) == {"2026-11-21": [rerun["run_id"]],
                                                       "2026-11-22": [second["run_id"]]}
        assert first["rows"] == rerun["rows"]
    finally:
        store.close()
