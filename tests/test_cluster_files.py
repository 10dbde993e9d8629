"""The deployment files under cluster/: they parse, say what the job runs, and stay private.

Fast and offline: nothing here starts Ray or talks to a cloud or a Kubernetes API. local.sh
is run only for its usage error, and the CronJob's launcher script against a stand-in kubectl.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CLUSTER = ROOT / "cluster"
LOCAL_SH = CLUSTER / "local.sh"
AWS = CLUSTER / "aws-gpu.yaml"
RAYJOB = CLUSTER / "kuberay" / "rayjob.yaml"
CRONJOB = CLUSTER / "kuberay" / "cronjob.yaml"
ENTRYPOINT = "python -m jobs.align"


def docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def kind(path: Path, k: str) -> dict:
    found = [d for d in docs(path) if d.get("kind") == k]
    assert len(found) == 1, f"{path.name}: expected one {k}, found {len(found)}"
    return found[0]


def yaml_files() -> list[Path]:
    return sorted(p for p in CLUSTER.rglob("*") if p.suffix in (".yaml", ".yml"))


# --- every YAML -------------------------------------------------------------------------

def test_the_expected_files_exist():
    for p in (LOCAL_SH, AWS, RAYJOB, CRONJOB, ROOT / "docs" / "cluster.md"):
        assert p.is_file(), p
    assert set(yaml_files()) >= {AWS, RAYJOB, CRONJOB}


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(CLUSTER)))
def test_every_yaml_parses(path):
    loaded = docs(path)
    assert loaded and all(isinstance(d, dict) for d in loaded)


def _public_binds(text: str) -> list[tuple[int, str]]:
    """Lines binding something to 0.0.0.0 whose comment (same line or the 3 lines above)
    does not say it is inside a private network, pod or cluster."""
    lines = text.splitlines()
    bad = []
    for i, line in enumerate(lines):
        if "0.0.0.0" not in line:
            continue
        if line.lstrip().startswith("#"):
            continue  # prose in a comment, not a setting
        comment = " ".join(c.split("#", 1)[1] for c in lines[max(0, i - 3):i + 1] if "#" in c)
        if not re.search(r"inside|private|clusterip|vpc|loopback", comment.lower()):
            bad.append((i + 1, line.strip()))
    return bad


@pytest.mark.parametrize("path", sorted(p for p in CLUSTER.rglob("*") if p.is_file()),
                         ids=lambda p: str(p.relative_to(CLUSTER)))
def test_nothing_binds_0000_without_saying_it_is_private(path):
    assert _public_binds(path.read_text()) == []


def test_the_0000_check_can_fail():
    assert _public_binds("rayStartParams:\n  dashboard-host: '0.0.0.0'\n")
    assert not _public_binds("  dashboard-host: '0.0.0.0'  # inside the pod; ClusterIP only\n")


# --- local.sh ---------------------------------------------------------------------------

def test_local_sh_is_valid_bash():
    subprocess.run(["bash", "-n", str(LOCAL_SH)], check=True)
    assert os.access(LOCAL_SH, os.X_OK), "local.sh must be executable"
    assert LOCAL_SH.read_text().splitlines()[1:].count("set -euo pipefail") == 1


def test_local_sh_binds_loopback():
    text = LOCAL_SH.read_text()
    assert "--node-ip-address=127.0.0.1" in text
    assert "--dashboard-host=127.0.0.1" in text
    # without this Ray replaces a loopback node ip by the routable one (Linux)
    assert re.search(r"^export RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0$", text, re.M)
    assert "0.0.0.0" not in text


@pytest.mark.parametrize("args", [["bogus"], [], ["start", "extra"], ["submit"]])
def test_local_sh_usage_and_exit_2(args, tmp_path):
    # whether or not `ray` is on PATH: a bad command line fails before any ray call
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(LOCAL_SH), *args], capture_output=True, text=True,
                       env=env, timeout=30)
    assert r.returncode == 2, r
    assert "usage: cluster/local.sh" in r.stderr
    if args == ["bogus"]:
        assert "unknown subcommand 'bogus'" in r.stderr


# --- the cloud launcher -----------------------------------------------------------------

def test_launcher_has_a_cpu_head_and_gpu_workers():
    c = yaml.safe_load(AWS.read_text())
    assert c["provider"]["type"] == "aws"
    types = c["available_node_types"]
    head = types[c["head_node_type"]]
    workers = {n: t for n, t in types.items() if n != c["head_node_type"]}
    assert workers
    assert head["resources"].get("GPU", 0) == 0
    for t in workers.values():
        assert t["resources"]["GPU"] >= 1
        assert t["node_config"]["InstanceType"].startswith(("g5.", "g6.", "p"))
        assert t["max_workers"] > t.get("min_workers", 0)  # autoscaling
    assert c["max_workers"] >= max(t["max_workers"] for t in workers.values())


def test_launcher_keeps_the_dashboard_private_and_installs_gpu_builds():
    c = yaml.safe_load(AWS.read_text())
    head_start = " ".join(c["head_start_ray_commands"])
    assert "--dashboard-host=127.0.0.1" in head_start
    assert "ray dashboard cluster/aws-gpu.yaml" in AWS.read_text()
    workers = " ".join(c["worker_setup_commands"])
    assert "faiss-gpu>=1.15" in workers and "whl/cu12" in workers  # one CUDA major
    assert "pip install" in " ".join(c["head_setup_commands"]) and "-e ~/tfgm-dist" in workers


def test_the_image_pairs_cuda_12_builds_of_torch_and_faiss_and_keeps_its_ray():
    docker = (CLUSTER / "kuberay" / "Dockerfile").read_text()
    run = docker[docker.index("RUN pip"):]
    assert "whl/cu128" in run and "uninstall -y faiss-cpu" in run and "faiss-gpu>=1.15" in run
    assert run.count("-c constraints.txt") == 3
    image = re.search(r"FROM rayproject/ray:([0-9.]+)-", docker).group(1)
    pins = (CLUSTER / "kuberay" / "constraints.txt").read_text().split()
    assert f"ray[default]=={image}" in pins


def test_launcher_passes_rays_own_schema():
    validate = pytest.importorskip("ray.autoscaler._private.util").validate_config
    pytest.importorskip("jsonschema")
    validate(yaml.safe_load(AWS.read_text()))


# --- KubeRay ----------------------------------------------------------------------------

def test_rayjob_runs_the_align_entrypoint_on_the_mounted_config():
    job = kind(RAYJOB, "RayJob")
    assert job["apiVersion"] == "ray.io/v1"
    spec = job["spec"]
    assert spec["entrypoint"] == f"{ENTRYPOINT} /config/job.toml"
    assert spec["shutdownAfterJobFinishes"] is True
    assert isinstance(spec["ttlSecondsAfterFinished"], int) and spec["ttlSecondsAfterFinished"] > 0
    head = spec["rayClusterSpec"]["headGroupSpec"]
    mounts = head["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "job-config", "mountPath": "/config", "readOnly": True} in mounts
    cm = kind(RAYJOB, "ConfigMap")
    volume = head["template"]["spec"]["volumes"][0]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]


def test_rayjob_head_service_is_cluster_ip_only():
    head = kind(RAYJOB, "RayJob")["spec"]["rayClusterSpec"]["headGroupSpec"]
    assert head["serviceType"] == "ClusterIP"
    text = RAYJOB.read_text()
    assert "NodePort" not in text.replace("never NodePort", "")
    assert "LoadBalancer" not in text.replace("/ LoadBalancer", "")


def test_rayjob_has_a_gpu_worker_group():
    groups = kind(RAYJOB, "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    gpu = [g for g in groups
           if g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu")]
    assert gpu and gpu[0]["template"]["spec"]["containers"][0]["resources"]["limits"][
        "nvidia.com/gpu"] == 1


def _job_toml() -> dict:
    return tomllib.loads(kind(RAYJOB, "ConfigMap")["data"]["job.toml"])


def test_embedded_job_toml_has_job_and_ray_sections():
    cfg = _job_toml()
    for key in ("source", "target", "out"):
        assert cfg["job"][key], key
    assert re.match(r"^(s3|gs|abfs|hdfs)://", cfg["job"]["out"]), "output to an object store"
    assert "partitions" in cfg["ray"]
    groups = kind(RAYJOB, "RayJob")["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert cfg["ray"]["partitions"] == sum(g["replicas"] for g in groups)


def test_embedded_job_adds_each_night_to_a_delta_table_as_its_date():
    job = _job_toml()["job"]
    assert job["out_format"] == "delta"
    assert not job.get("overwrite") and not job.get("run_date")  # the date is today's, per run


def test_embedded_job_toml_is_a_valid_config():
    config = pytest.importorskip("tfgm_dist.config")
    cfg = _job_toml()
    known = {f for f in config.Config.__dataclass_fields__}
    config.from_dict({k: v for k, v in cfg.items() if k in known}, "job.toml")
    assert set(cfg) <= known | {"job", "ray"}


# --- the CronJob ------------------------------------------------------------------------

def test_cronjob_is_forbid_and_launches_with_least_rights():
    cron = kind(CRONJOB, "CronJob")
    assert cron["apiVersion"] == "batch/v1"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    sa = kind(CRONJOB, "ServiceAccount")["metadata"]["name"]
    assert pod["serviceAccountName"] == sa
    role = kind(CRONJOB, "Role")
    assert role["rules"] == [{"apiGroups": ["ray.io"], "resources": ["rayjobs"],
                              "verbs": ["create", "get", "list", "delete"]}]
    binding = kind(CRONJOB, "RoleBinding")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa,
                                    "namespace": role["metadata"]["namespace"]}]
    assert not [d for d in docs(CRONJOB) if d["kind"].startswith("Cluster")]
    ns = {d["metadata"]["namespace"] for d in docs(CRONJOB) + docs(RAYJOB)}
    assert len(ns) == 1


FAKE_KUBECTL = r"""#!/bin/sh
# A stand-in for kubectl: records what the launcher does, answers from $FAKE.
printf "%s\n" "$*" >> "$FAKE/calls"
case "$*" in
  *" create -f - -o name")
    cat > "$FAKE/created.yaml"; echo "rayjob.ray.io/tfgm-align-x7k2p" ;;
  *"get rayjobs -l"*"jsonpath"*)
    cat "$FAKE/previous" ;;
  *"get rayjobs -l"*"-o name")
    for i in 1 2 3 4 5 6 7; do echo "rayjob.ray.io/tfgm-align-old$i"; done ;;
  *"get rayjob.ray.io/tfgm-align-x7k2p -o jsonpath"*)
    n=$(cat "$FAKE/polls" 2>/dev/null || echo 0); echo $((n + 1)) > "$FAKE/polls"
    if [ "$n" -lt 1 ]; then printf 'Running/RUNNING'; else cat "$FAKE/final"; fi ;;
  *" delete "*) printf "%s\n" "$*" >> "$FAKE/deleted" ;;
  *) echo "unexpected kubectl $*" >&2; exit 9 ;;
esac
"""


def _launch(tmp_path: Path, final: str, previous: str = "Complete\nFailed\n"):
    script = kind(CRONJOB, "CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"][
        "containers"][0]["args"][0]
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "final").write_text(final)
    (fake / "previous").write_text(previous)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": f"{bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}", "FAKE": str(fake),
           "NAMESPACE": "tfgm", "TEMPLATE": str(RAYJOB), "POLL_SECONDS": "0",
           "KEEP_RAYJOBS": "5", "HOME": str(tmp_path)}
    r = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env,
                       timeout=60)
    return r, fake


needs_sh = pytest.mark.skipif(shutil.which("sh") is None or shutil.which("awk") is None,
                              reason="needs sh and awk")


@needs_sh
def test_cron_launcher_creates_a_uniquely_named_rayjob_and_waits(tmp_path):
    r, fake = _launch(tmp_path, "Complete/SUCCEEDED")
    assert r.returncode == 0, r.stderr
    created = yaml.safe_load((fake / "created.yaml").read_text())
    template = kind(RAYJOB, "RayJob")
    assert created["kind"] == "RayJob"
    assert "name" not in created["metadata"]
    assert created["metadata"]["generateName"] == template["metadata"]["name"] + "-"
    assert created["spec"] == template["spec"]
    calls = (fake / "calls").read_text()
    assert all(c.startswith("-n tfgm ") for c in calls.splitlines())
    assert (fake / "polls").read_text().strip() == "2"  # waited past RUNNING
    assert len((fake / "deleted").read_text().splitlines()) == 2  # 7 kept down to 5
    assert "old1" in (fake / "deleted").read_text() and "old7" not in (fake / "deleted").read_text()


@needs_sh
@pytest.mark.parametrize("final", ["Complete/FAILED", "Failed/", "Complete/STOPPED",
                                   "ValidationFailed/", "Suspended/"])
def test_cron_launcher_fails_when_the_run_fails(tmp_path, final):
    r, _ = _launch(tmp_path, final)
    assert r.returncode == 1


@needs_sh
def test_cron_launcher_runs_after_runs_that_ended_in_any_terminal_state(tmp_path):
    r, fake = _launch(tmp_path, "Complete/SUCCEEDED",
                      previous="Complete\nFailed\nValidationFailed\nSuspended\n")
    assert r.returncode == 0, r.stderr
    assert (fake / "created.yaml").exists()


@needs_sh
def test_cron_launcher_skips_while_a_run_is_active(tmp_path):
    r, fake = _launch(tmp_path, "Complete/SUCCEEDED", previous="Complete\nRunning\n")
    assert r.returncode == 1 and "still running" in r.stderr
    assert not (fake / "created.yaml").exists()
