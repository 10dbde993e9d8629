"""Stage 6b, write: output-folder checks, atomic Parquet + metrics + manifest, fingerprints."""
import hashlib
import os
import json

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from tfgm_dist.errors import InputError
from tfgm_dist.write import FORMAT, MANIFEST, Location, check_output, commit, fingerprint, \
    location, staging, write_matches

CONFIG = {"seed": 0, "top_k": 2}
RUN = {"config": CONFIG, "versions": {"tfgm_dist": "0.1.0"}}


def matches(n: int = 5, offset: int = 0) -> pa.Table:
    return pa.table({
        "source_id": pa.array([f"s{i // 2}" for i in range(n)], pa.string()),
        "target_id": pa.array([f"t{i + offset}" for i in range(n)], pa.string()),
        "rank": pa.array([1 + i % 2 for i in range(n)], pa.int32()),
        "score": pa.array([1.0 - 0.1 * i for i in range(n)], pa.float32()),
    })


def run(out, table: pa.Table, metrics=None, **write_kwargs) -> dict:
    """One complete write: staging, matches, commit with a manifest listing the part."""
    out = location(out)
    with staging(out, overwrite=True) as stage:
        part = write_matches(stage, table, RUN, **write_kwargs)
        commit(stage, out, metrics or {"hits@1": 50.0}, {"files": [part], "config": CONFIG})
    return part


def leftovers(parent) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def test_check_output_accepts_a_new_path_and_an_empty_folder(tmp_path):
    assert check_output(tmp_path / "new", overwrite=False).path == str(tmp_path / "new")
    (tmp_path / "empty").mkdir()
    assert check_output(f"file://{tmp_path}/empty", overwrite=False).path == \
        str(tmp_path / "empty")
    assert not (tmp_path / "new").exists()  # checking creates nothing


def test_check_output_refuses_non_empty_folder_without_manifest(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(InputError, match="not empty and holds no tfgm-dist result"):
            check_output(out, overwrite=overwrite)
    assert (out / "notes.txt").read_text() == "mine"


def test_check_output_refuses_previous_run_without_overwrite_and_accepts_with_it(tmp_path):
    out = tmp_path / "out"
    run(out, matches())
    with pytest.raises(InputError, match="previous run; pass --overwrite"):
        check_output(out, overwrite=False)
    assert check_output(out, overwrite=True).path == str(out)
    assert (out / MANIFEST).exists()


def test_check_output_refuses_a_file_and_a_missing_parent(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="not a folder"):
        check_output(tmp_path / "file", overwrite=True)
    with pytest.raises(InputError, match="parent folder of the output does not exist"):
        check_output(tmp_path / "no" / "out", overwrite=False)


def test_committed_run_has_readable_dataset_metrics_and_manifest(tmp_path):
    out = tmp_path / "out"
    table = matches(7)
    metrics = {"hits@1": 42.0, "mrr": 0.5, "seconds": {"embed": 1.5}}
    part = run(out, table, metrics)

    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "matches", "metrics.json"]
    assert [p.name for p in (out / "matches").iterdir()] == ["part-00000.parquet"]
    read = ds.dataset(out / "matches", format="parquet").to_table()
    assert read.schema.remove_metadata() == table.schema
    assert read.replace_schema_metadata(None).equals(table)
    file_meta = pq.read_schema(out / "matches" / "part-00000.parquet").metadata
    assert json.loads(file_meta[b"tfgm_dist.config"]) == CONFIG
    assert json.loads(file_meta[b"tfgm_dist.versions"]) == RUN["versions"]

    assert json.loads((out / "metrics.json").read_text()) == metrics
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["format"] == FORMAT and manifest["config"] == CONFIG
    assert "created" in manifest
    assert manifest["files"] == [part]
    (entry,) = manifest["files"]
    assert entry["path"] == "matches/part-00000.parquet"
    assert entry["rows"] == read.num_rows == 7
    assert entry["bytes"] == (out / entry["path"]).stat().st_size
    assert leftovers(tmp_path) == []  # no staging folder behind


def test_write_matches_honours_row_group_size(tmp_path):
    out = tmp_path / "out"
    run(out, matches(5), row_group_size=2)
    assert pq.ParquetFile(out / "matches" / "part-00000.parquet").num_row_groups == 3


def test_empty_result_still_writes_schema_and_zero_rows(tmp_path):
    out = tmp_path / "out"
    part = run(out, matches(0))
    read = ds.dataset(out / "matches", format="parquet").to_table()
    assert read.num_rows == 0 and part["rows"] == 0
    assert read.schema.remove_metadata() == matches(0).schema


def test_exception_before_commit_leaves_no_output_and_no_staging(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        with staging(location(out), overwrite=True) as stage:
            write_matches(stage, matches(), RUN)
            assert stage.parent.path == str(tmp_path) and stage.name.startswith(".out.staging")
            raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_exception_before_commit_keeps_the_previous_run_intact(tmp_path):
    out = tmp_path / "out"
    run(out, matches(3))
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with pytest.raises(RuntimeError):
        with staging(location(out), overwrite=True) as stage:
            write_matches(stage, matches(9, offset=100), RUN)
            raise RuntimeError("failed mid-run")
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert leftovers(tmp_path) == []


def test_commit_over_a_previous_run_replaces_it_whole(tmp_path):
    out = tmp_path / "out"
    run(out, matches(6), {"hits@1": 1.0})
    (out / "matches" / "part-00001.parquet").write_bytes(b"stale part of the old run")
    (out / "stale.txt").write_text("old")
    check_output(out, overwrite=True)
    new = matches(3, offset=50)
    run(out, new, {"hits@1": 2.0})
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "matches", "metrics.json"]
    assert [p.name for p in (out / "matches").iterdir()] == ["part-00000.parquet"]
    read = ds.dataset(out / "matches", format="parquet").to_table()
    assert read.replace_schema_metadata(None).equals(new)
    assert json.loads((out / "metrics.json").read_text()) == {"hits@1": 2.0}
    assert json.loads((out / MANIFEST).read_text())["files"][0]["rows"] == 3
    assert leftovers(tmp_path) == []  # neither staging nor the renamed old run remain


def object_store(tmp_path) -> Location:
    """A filesystem without folder rename, as S3 or GCS would be: the copy path."""
    store = Location(pafs.SubTreeFileSystem(str(tmp_path), pafs.LocalFileSystem()), "lake/run")
    assert not store.local
    return store


def listed(out) -> list[str]:
    return [f["path"] for f in json.loads((out / MANIFEST).read_text())["files"]]


def test_object_store_commit_copies_the_manifest_last_and_replaces_the_old_run(tmp_path):
    store, out = object_store(tmp_path), tmp_path / "lake" / "run"
    run(store, matches(6), {"hits@1": 1.0})
    (out / "matches" / "part-00001.parquet").write_bytes(b"stale")
    check_output(store, overwrite=True)
    run(store, matches(3, offset=50), {"hits@1": 2.0})
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "matches", "metrics.json"]
    files = listed(out)
    assert [f"matches/{p.name}" for p in (out / "matches").iterdir()] == files
    assert ds.dataset([str(out / f) for f in files], format="parquet").count_rows() == 3
    assert json.loads((out / "metrics.json").read_text()) == {"hits@1": 2.0}
    newest = max((p for p in out.rglob("*") if p.is_file()), key=lambda p: p.stat().st_mtime_ns)
    assert newest.name == MANIFEST
    assert leftovers(tmp_path / "lake") == []


def test_object_store_commit_dying_before_its_manifest_leaves_the_old_run_whole(
        tmp_path, monkeypatch):
    store, out = object_store(tmp_path), tmp_path / "lake" / "run"
    run(store, matches(6), {"hits@1": 1.0})
    before = listed(out)
    write_text = Location.write_text

    def dies_at_the_manifest(self, text):
        if self.name == MANIFEST and "lake/run" in self.path:
            raise OSError("connection reset")
        write_text(self, text)

    monkeypatch.setattr(Location, "write_text", dies_at_the_manifest)
    with pytest.raises(OSError):
        run(store, matches(3, offset=50), {"hits@1": 2.0})
    assert listed(out) == before  # the manifest still names the old run, whose files remain
    assert ds.dataset([str(out / f) for f in before], format="parquet").count_rows() == 6


def test_commit_into_an_existing_empty_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    run(out, matches(2))
    assert ds.dataset(out / "matches", format="parquet").count_rows() == 2
    assert leftovers(tmp_path) == []


def test_fingerprint_of_a_file_is_its_size_and_sha256(tmp_path):
    f = tmp_path / "g.tsv"
    f.write_bytes(b"a\tb\nb\tc\n")
    fp = fingerprint(f)
    assert fp == {"path": str(f), "bytes": 8, "sha256": hashlib.sha256(b"a\tb\nb\tc\n").hexdigest()}
    f.write_bytes(b"a\tb\nb\td\n")  # same size, other content
    assert fingerprint(f)["sha256"] != fp["sha256"]


def test_fingerprint_of_a_folder_changes_when_content_changes(tmp_path):
    d = tmp_path / "graph"
    (d / "edges").mkdir(parents=True)
    (d / "nodes.parquet").write_bytes(b"nodes-v1")
    (d / "edges" / "part-0.parquet").write_bytes(b"edges-v1")
    fp = fingerprint(d)
    assert fp["bytes"] == 16 and fp["path"] == str(d)
    assert fingerprint(d) == fp  # stable
    (d / "edges" / "part-0.parquet").write_bytes(b"edges-v2")
    changed = fingerprint(d)
    assert changed["sha256"] != fp["sha256"]
    (d / "edges" / "part-1.parquet").write_bytes(b"more")
    added = fingerprint(d)
    assert added["sha256"] != changed["sha256"] and added["bytes"] == 20


@pytest.mark.parametrize("change", ["shift", "rename"])
def test_fingerprint_of_a_folder_sees_file_boundaries_and_names(tmp_path, change):
    d = tmp_path / "graph"
    d.mkdir()
    (d / "a").write_bytes(b"ab")
    (d / "b").write_bytes(b"c")
    fp = fingerprint(d)
    if change == "shift":
        (d / "a").write_bytes(b"a")
        (d / "b").write_bytes(b"bc")
    else:
        (d / "b").rename(d / "c")
    assert fingerprint(d)["sha256"] != fp["sha256"]


def test_any_run_sweeps_the_staging_that_dead_runs_left_beside_it(tmp_path):
    import socket
    dead = tmp_path / f".other.staging-{socket.gethostname()}-999999999-abcd1234"
    live = tmp_path / f".other.staging-{socket.gethostname()}-{os.getpid()}-abcd1234"
    for d in (dead, live):
        (d / "matches").mkdir(parents=True)
    run(tmp_path / "out", matches())
    assert not dead.exists()  # a killed run's, though it wrote another output
    assert live.exists()  # a running process's: kept


def test_an_output_inside_an_input_folder_leaves_the_input_fingerprint_alone(tmp_path):
    d = tmp_path / "graph"
    d.mkdir()
    (d / "edges.parquet").write_bytes(b"edges")
    out = location(d / "out")
    before = fingerprint(d, out)
    run(d / "out", matches())
    (d / ".out.staging-host-1-abc").mkdir()
    (d / ".out.staging-host-1-abc" / "x").write_bytes(b"x")
    assert fingerprint(d, out) == before
    assert fingerprint(d) != before  # without naming the output, it counts


def test_a_job_removes_the_input_folders_of_killed_runs(tmp_path, monkeypatch):
    import socket
    import tempfile

    from tfgm_dist.job import _inputs_folder
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"tfgm-inputs-{socket.gethostname()}-999999999-x1"
    dead.mkdir()
    with _inputs_folder() as mine:
        assert not dead.exists() and os.path.isdir(mine)
        assert f"-{os.getpid()}-" in os.path.basename(mine)
