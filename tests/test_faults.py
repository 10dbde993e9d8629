"""Crashes and lost workers never lose or corrupt a result: a killed driver leaves no
partial output and the rerun resumes; killed Ray actors are restarted with identical rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest
import ray

from tfgm_dist import cli
from tfgm_dist.config import Config, with_overrides
from tfgm_dist.errors import InputError
from tfgm_dist.job import OnRay, run_job
from tfgm_dist.synth import write_pair


def table(out: Path):
    t = ds.dataset(out / "matches", format="parquet").to_table().replace_schema_metadata(None)
    return t.sort_by([("source_id", "ascending"), ("rank", "ascending")])


def hidden(folder: Path) -> list[str]:
    return sorted(p.name.split("-")[0] for p in folder.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pair")
    quick = folder / "quick.toml"  # these tests are about faults: one pass, not bootstrapped
    quick.write_text("[bootstrap]\nrounds = 0\n")
    return {**write_pair(folder, 1500, seed=7), "config": quick}


def align(pair, out: Path, *extra: str, failpoint: str | None = None):
    """The real command in a new process (a SIGKILL must hit a whole driver)."""
    env = {k: v for k, v in os.environ.items() if k != "TFGM_FAILPOINT"}
    if failpoint:
        env["TFGM_FAILPOINT"] = failpoint
    return subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "align",
                           str(pair["source"]), str(pair["target"]), "--gold", str(pair["gold"]),
                           "--out", str(out), "--top-k", "3", "--config", str(pair["config"]),
                           *extra],
                          env=env, capture_output=True, text=True, timeout=600)


def in_process(pair, out: Path, *extra: str) -> int:
    """The same command in this process: the runs that are not killed need none of their own."""
    return cli.main(["-q", "align", str(pair["source"]), str(pair["target"]), "--gold",
                     str(pair["gold"]), "--out", str(out), "--top-k", "3", "--config",
                     str(pair["config"]), *extra])


@pytest.mark.parametrize("extra", [
    pytest.param([], id="one process"),
    pytest.param(["--partitions", "2"], id="ray", marks=pytest.mark.slow)])
def test_driver_killed_in_the_write_stage_leaves_no_result_and_the_rerun_resumes(
        pair, tmp_path, extra, capsys):
    assert in_process(pair, tmp_path / "calm", *extra) == 0
    lake = tmp_path / "lake"
    lake.mkdir()
    out = lake / "run"
    killed = align(pair, out, *extra, failpoint="write")
    assert killed.returncode == -9, killed.stderr
    assert not out.exists()  # a reader sees no dataset at all, not a partial one
    # the killed run's lock file stays (its lock died with it), as do its staging and checkpoint
    assert hidden(lake) == [".run.lock", ".run.resume", ".run.staging"]

    assert in_process(pair, out, *extra) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert "resume" in metrics["seconds"] and "embed" not in metrics["seconds"]
    assert table(out).equals(table(tmp_path / "calm"))
    calm = json.loads((tmp_path / "calm" / "metrics.json").read_text())
    assert metrics["hits@1"] == calm["hits@1"]
    assert hidden(lake) == []  # the killed run's staging is swept, the checkpoint discarded


def test_driver_killed_before_its_delta_commit_leaves_the_table_at_its_last_version(
        pair, tmp_path, capsys):
    from deltalake import DeltaTable
    table = tmp_path / "lake"
    dated = ("--out-format", "delta", "--run-date", "2026-11-22")

    def run() -> dict:
        assert in_process(pair, table, *dated) == 0
        return json.loads(capsys.readouterr().out)

    run()
    before = DeltaTable(str(table)).to_pyarrow_table()
    killed = align(pair, table, *dated, failpoint="write")
    assert killed.returncode == -9, killed.stderr
    after = DeltaTable(str(table))
    assert after.version() == 0 and after.to_pyarrow_table().equals(before)
    assert "resume" in run()["seconds"]
    assert DeltaTable(str(table)).version() == 1


def test_output_outside_the_declared_root_is_refused(pair, tmp_path, capsys):
    (tmp_path / "root").mkdir()
    config = tmp_path / "c.toml"
    config.write_text('[job]\noutput_root = "root"\n')

    def align_here(out: Path) -> int:
        return cli.main(["-q", "align", str(pair["source"]), str(pair["target"]), "--out",
                         str(out), "--config", str(config)])
    for out in (tmp_path / "elsewhere", tmp_path / "root" / ".." / "escape", tmp_path / "root"):
        assert align_here(out) == 2
        assert capsys.readouterr().err.strip() == (
            f"error: {os.path.abspath(out)}: output path is outside the output root "
            f"{tmp_path / 'root'} (job.output_root)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml", "root"]
    assert align_here(tmp_path / "root" / "run") == 0


def test_a_dense_hungarian_too_big_for_memory_is_refused_naming_the_sparse_solver(
        pair, tmp_path, monkeypatch):
    from tfgm_dist import assign
    monkeypatch.setattr(assign, "DENSE_MAX_BYTES", 1 << 20)
    cfg = with_overrides(Config(), **{"assign.method": "one-to-one",
                                      "assign.one_to_one": "hungarian",
                                      "job.source": str(pair["source"]),
                                      "job.target": str(pair["target"]),
                                      "job.out": str(tmp_path / "out")})
    with pytest.raises(InputError, match=r"needs a dense 1500 x 1500 matrix \(0\.0 GiB, limit "
                       r"0\.0 GiB.*use assign\.one_to_one = 'sparse'"):
        run_job(cfg)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_search_actor_killed_mid_shard_is_restarted_and_the_output_is_identical(
        cluster, pair, tmp_path):
    cfg = with_overrides(Config(), **{"top_k": 3, "search.k": 10, "ray.partitions": 2,
                                      "refine.enabled": True, "refine.steps": 3,
                                      "job.source": str(pair["source"]),
                                      "job.target": str(pair["target"]),
                                      "job.gold": str(pair["gold"])})
    run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "calm")}))
    killed = []

    def kill_in_backward_search(event: str, info: dict) -> None:
        if event == "search" and info["direction"] == "backward" and not killed:
            ray.kill(info["workers"][0], no_restart=False)
            killed.append(info["part"])

    run_job(with_overrides(cfg, **{"job.out": str(tmp_path / "killed")}),
            OnRay(kill_in_backward_search))
    assert killed
    assert table(tmp_path / "killed").equals(table(tmp_path / "calm"))


@pytest.mark.slow
def test_a_stale_cluster_address_file_does_not_make_a_run_hang(pair, tmp_path):
    """A head that died leaves Ray's address file behind; a run without an address used to
    join it and wait forever. Ray's folder is a short one of this test's (socket paths are
    limited to 107 characters)."""
    import shutil
    import tempfile
    short = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    try:
        (short / "ray").mkdir()
        (short / "ray" / "ray_current_cluster").write_text("127.0.0.1:1")
        env = {**os.environ, "RAY_TMPDIR": str(short)}
        env.pop("RAY_ADDRESS", None)
        done = subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "align",
                               str(pair["source"]), str(pair["target"]), "--out",
                               str(tmp_path / "out"), "--partitions", "2"],
                              env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr
    finally:
        shutil.rmtree(short, ignore_errors=True)
