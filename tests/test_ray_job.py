"""`ray job submit` of the real entrypoint against a Ray head started on loopback."""
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from tfgm_dist.config import load_config, with_overrides
from tfgm_dist.job import run_job
from tfgm_dist.synth import write_pair

ROOT = Path(__file__).resolve().parents[1]
LOCAL = ROOT / "cluster" / "local.sh"


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on loopback: bound together, since a port just released can
    be handed out again at once."""
    held = [socket.socket() for _ in range(n)]
    for s in held:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in held]
    for s in held:
        s.close()
    return ports


@pytest.mark.slow
def test_ray_job_submit_runs_jobs_align_and_lands_a_parquet_dataset(tmp_path):
    """As on KubeRay (cluster/kuberay): a head that offers no core, where the job's driver
    runs and its inputs are, and a worker node joined to it."""
    data = write_pair(tmp_path / "data", 2000, seed=1)
    config = tmp_path / "job.toml"
    config.write_text(f"""
        top_k = 2
        [job]
        source = "{data['source']}"
        target = "{data['target']}"
        gold = "{data['gold']}"
        out = "out"
        [embed]
        layers = 2
        [search]
        k = 10
        [bootstrap]
        rounds = 0
        [ray]
        partitions = 2
    """.replace("\n        ", "\n"))
    port, dash = free_ports(2)
    env = {**os.environ, "RAY_PORT": str(port), "RAY_DASHBOARD_PORT": str(dash),
           "RAY_NUM_CPUS": "0", "RAY_TEMP_DIR": f"/tmp/ray-tfgm-test-{port}",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    started = subprocess.run([str(LOCAL), "start"], env=env, capture_output=True, text=True)
    try:
        assert started.returncode == 0, started.stderr
        joined = subprocess.run([str(LOCAL), "join"], env={**env, "RAY_NUM_CPUS": "2"},
                                capture_output=True, text=True)
        assert joined.returncode == 0, joined.stderr
        job = subprocess.run([str(LOCAL), "submit", str(config)], env=env, capture_output=True,
                             text=True, timeout=900)
        log = job.stdout + job.stderr
        assert job.returncode == 0, log
        assert "succeeded" in log and "embed: graph s, channel 0, layer 2/2 on 2 parts" in log
    finally:
        subprocess.run([str(LOCAL), "stop"], env=env, capture_output=True, timeout=120)
    out = tmp_path / "out"  # relative to the config file
    manifest = json.loads((out / "manifest.json").read_text())
    assert [f["path"] for f in manifest["files"]] == ["matches/part-00000.parquet",
                                                      "matches/part-00001.parquet"]
    table = ds.dataset(out / "matches", format="parquet").to_table()
    assert table.num_rows == sum(f["rows"] for f in manifest["files"]) == 2 * 2000
    assert table.schema.names == ["source_id", "target_id", "rank", "score", "confidence"]
    assert set(table.column("rank").to_pylist()) == {1, 2}
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ray"]["partitions"] == 2 and metrics["hits@1"] > 0.5
    assert metrics["run_id"].startswith("raysubmit_") and metrics["run_id"] in log
    gold = dict(zip(*pq.read_table(data["gold"]).columns))
    top = table.filter(ds.field("rank") == 1)
    right = sum(gold[s] == t for s, t in zip(top.column("source_id"), top.column("target_id")))
    assert right / top.num_rows == metrics["accuracy"]
    assert not list(tmp_path.glob(".out.staging-*"))
    assert subprocess.run(["pgrep", "-f", f"ray-tfgm-test-{port}"]).returncode == 1


@pytest.mark.slow
def test_a_worker_node_lost_mid_job_leaves_the_output_identical(tmp_path):
    """Head and a second node joined on loopback; the job's actors are spread over both; the
    second node dies at once during the search; Ray restarts its actor on the head and
    rebuilds the lost objects, and the rows equal the single-process run."""
    data = write_pair(tmp_path / "data", 20000, seed=2)
    config = tmp_path / "job.toml"
    config.write_text(f"""
        [job]
        source = "{data['source']}"
        target = "{data['target']}"
        gold = "{data['gold']}"
        out = "out"
        [search]
        k = 10
        [bootstrap]
        rounds = 0
        [ray]
        partitions = 2
    """.replace("\n        ", "\n"))
    reference = run_job(with_overrides(load_config(config), **{"ray.partitions": 0,
                                                               "job.out": str(tmp_path / "ref")}))
    port, dash = free_ports(2)
    env = {**os.environ, "RAY_PORT": str(port), "RAY_DASHBOARD_PORT": str(dash),
           "RAY_NUM_CPUS": "2", "RAY_TEMP_DIR": f"/tmp/ray-tfgm-test-{port}",
           "RAY_AUTH_MODE": "token",  # as cluster/local.sh runs every ray command
           # the head declares the lost node dead after ~2 s, not Ray's default ~15-50 s
           "RAY_health_check_period_ms": "500", "RAY_health_check_timeout_ms": "1000",
           "RAY_health_check_failure_threshold": "3",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    address = f"http://127.0.0.1:{dash}"

    def ray_cli(*args: str) -> str:
        r = subprocess.run(["ray", *args], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout + r.stderr

    try:
        for step in ("start", "join"):
            r = subprocess.run([str(LOCAL), step], env=env, capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
        runtime = json.dumps({"env_vars": {"PYTHONPATH": str(ROOT)}})
        submitted = ray_cli("job", "submit", "--address", address, "--no-wait",
                            "--runtime-env-json", runtime, "--", "python", "-m", "jobs.align",
                            str(config))
        job_id = re.search(r"raysubmit_\w+", submitted).group(0)
        deadline = time.time() + 600
        logs = ("job", "logs", "--address", address, job_id)
        while "search forward: part 2/2" not in ray_cli(*logs):
            assert time.time() < deadline, "the job never reached the search stage"
            time.sleep(0.5)
        assert "running" in ray_cli("job", "status", "--address", address, job_id).lower()
        lost = subprocess.run([str(LOCAL), "lose"], env=env, capture_output=True, text=True)
        assert lost.returncode == 0, lost.stderr
        while not re.search(r"succeeded|failed|stopped", (status := ray_cli(
                "job", "status", "--address", address, job_id)).lower()):
            assert time.time() < deadline, "the job did not finish after the node was lost"
            time.sleep(1)
        assert "succeeded" in status.lower(), ray_cli("job", "logs", "--address", address,
                                                      job_id)
    finally:
        subprocess.run([str(LOCAL), "stop"], env=env, capture_output=True, timeout=120)
    out = tmp_path / "out"
    rows = ds.dataset(out / "matches", format="parquet").to_table().replace_schema_metadata(None)
    ref = ds.dataset(tmp_path / "ref" / "matches", format="parquet").to_table() \
        .replace_schema_metadata(None)
    order = [("source_id", "ascending"), ("rank", "ascending")]
    assert rows.sort_by(order).equals(ref.sort_by(order))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["hits@1"] == reference["hits@1"]
