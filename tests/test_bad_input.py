"""Every bad input of the reliability checklist, through the real command: one ``error:``
line naming the file and the line, row or id, exit status 2, nothing under the output."""
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tfgm_dist import cli

EDGES = "a b\nb c\nc d\nd a\na c\n"


def parquet_graph(folder: Path, src, dst, ids=None, features=None) -> Path:
    folder.mkdir()
    pq.write_table(pa.table({"src": src, "dst": dst}), folder / "edges.parquet")
    if ids is not None:
        cols = {"id": ids}
        if features is not None:
            cols["features"] = pa.array(features, pa.list_(pa.float32()))
        pq.write_table(pa.table(cols), folder / "nodes.parquet")
    return folder


def featured(d: Path, name: str, rows) -> Path:
    return parquet_graph(d / name, ["a", "b", "c"], ["b", "c", "a"], ["a", "b", "c"], rows)


GOOD = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]


def with_config(name: str, text: str):
    """A case aligning the good graph with itself under config file ``name`` holding ``text``."""
    return lambda d: (d / "g.txt", d / "g.txt", ["--config", write(d / name, text)])


# name: (make inputs in folder d -> (source, target, extra args), words the error names)
CASES = {
    "missing file": (lambda d: (d / "absent.txt", d / "g.txt", []),
                     ["absent.txt", "no such file"]),
    "empty file": (lambda d: (write(d / "empty.txt", ""), d / "g.txt", []), ["empty.txt"]),
    "wrong column count": (lambda d: (write(d / "cols.txt", "a b\nb c d e\n"), d / "g.txt", []),
                           ["cols.txt", "line 2"]),
    "non-numeric id where the nodes declare ints": (
        lambda d: (parquet_graph(d / "ints", ["1", "x"], ["2", "1"], pa.array([1, 2], pa.int64())),
                   d / "g.txt", []), ["edges.parquet", "row 2", "'x'", "integer"]),
    "edge to a node not listed": (
        lambda d: (parquet_graph(d / "listed", ["a", "b"], ["b", "z"], ["a", "b"]), d / "g.txt",
                   []), ["edges.parquet", "row 2", "'z'"]),
    "seed naming an unknown id": (
        lambda d: (d / "g.txt", d / "g.txt", ["--seeds", write(d / "s.tsv", "a\ta\nq\tb\n")]),
        ["s.tsv", "line 2", "'q'"]),
    "gold naming an unknown id": (
        lambda d: (d / "g.txt", d / "g.txt", ["--gold", write(d / "gold.tsv", "a\ta\nb\tq\n")]),
        ["gold.tsv", "line 2", "'q'"]),
    "seed pairs mapping one node twice": (
        lambda d: (d / "g.txt", d / "g.txt", ["--seeds", write(d / "s2.tsv", "a\ta\na\tb\n")]),
        ["s2.tsv", "line 2", "'a'"]),
    "feature with NaN": (
        lambda d: (featured(d, "nan", [[1.0, 0.0], [float("nan"), 1.0], [1.0, 1.0]]),
                   featured(d, "ok", GOOD), []), ["nan", "'b'", "NaN"]),
    "feature with inf": (
        lambda d: (featured(d, "inf", [[1.0, float("inf")], [0.0, 1.0], [1.0, 1.0]]),
                   featured(d, "ok", GOOD), []), ["inf", "'a'", "infinite"]),
    "feature rows of different widths": (
        lambda d: (featured(d, "ragged", [[1.0, 0.0], [1.0], [1.0, 1.0]]),
                   featured(d, "ok", GOOD), []), ["ragged", "'b'"]),
    "feature widths differ between the graphs": (
        lambda d: (featured(d, "two", GOOD), featured(d, "three", [[1.0, 0, 0]] * 3), []),
        ["two", "three", "2", "3"]),
    "graph with no edges": (
        lambda d: (parquet_graph(d / "noedges", pa.array([], pa.string()),
                                 pa.array([], pa.string())), d / "g.txt", []),
        ["edges.parquet", "no edges"]),
    "config with an unknown key": (with_config("c.toml", "[search]\nkk = 3\n"),
                                   ["c.toml", "search.kk"]),
    "config value out of range": (with_config("r.toml", "[embed]\nlayers = -1\n"),
                                  ["r.toml", "embed.layers = -1", "out of range"]),
    "config value of the wrong type": (with_config("t.toml", "[refine]\nenabled = \"yes\"\n"),
                                       ["t.toml", "refine.enabled", "bool"]),
    "seeds covering every node": (
        lambda d: (d / "g.txt", d / "g.txt",
                   ["--seeds", write(d / "all.tsv", "a\ta\nb\tb\nc\tc\nd\td\n")]),
        ["seeds cover every"]),
    "min-confidence outside [0, 1]": (
        lambda d: (d / "g.txt", d / "g.txt", ["--min-confidence", "1.5"]),
        ["assign.min_confidence = 1.5", "out of range"]),
    "partitions above the node count": (
        lambda d: (d / "g.txt", d / "g.txt", ["--partitions", "9"]),
        ["ray.partitions = 9", "4 nodes"]),
    "a negative edge weight": (
        lambda d: (write(d / "neg.txt", "a b 1\nb c -2\nc a 1\n"), d / "g.txt",
                   ["--config", write(d / "gcn.toml", '[embed]\noperator = "gcn"\n')]),
        ["neg.txt", "line 2", "negative"]),
    "a graph whose only edges are self-loops": (
        lambda d: (write(d / "loops.txt", "a a\nb b\n"), d / "g.txt", []),
        ["loops.txt", "self-loop"]),
    "a device as input (endless)": (
        lambda d: (Path("/dev/zero"), d / "g.txt", []), ["/dev/zero", "not a regular file"]),
    "a pipe as input": (lambda d: (fifo(d / "pipe"), d / "g.txt", []),
                        ["pipe", "not a regular file"]),
    "a corrupt Parquet data page": (lambda d: (corrupt_parquet(d / "bad"), d / "g.txt", []),
                                    ["edges.parquet", "not a readable Parquet file"]),
    "a seed beyond 64 bits": (lambda d: (d / "g.txt", d / "g.txt",
                                         ["--seed", "18446744073709551616"]),
                              ["seed = 18446744073709551616", "out of range"]),
    "a YAML seed of 1e23": (with_config("s.yaml", "seed: 1e23\n"), ["s.yaml", "seed"]),
    "search.k of a billion": (with_config("k.toml", "[search]\nk = 1000000000\n"),
                              ["k.toml", "search.k = 1000000000", "out of range"]),
    "a config nested 5,000 deep": (with_config("deep.toml", "a = " + "[" * 5000 + "]" * 5000),
                                   ["deep.toml", "nested too deeply"]),
}


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def corrupt_parquet(folder: Path) -> Path:
    """A Parquet layout whose edges file keeps a valid footer but a damaged data page."""
    folder.mkdir()
    n = 2000
    pq.write_table(pa.table({"src": [f"n{i}" for i in range(n)],
                             "dst": [f"n{(i + 1) % n}" for i in range(n)]}),
                   folder / "edges.parquet", compression="snappy", use_dictionary=False)
    data = bytearray((folder / "edges.parquet").read_bytes())
    data[100:4000] = b"\xff" * 3900
    (folder / "edges.parquet").write_bytes(bytes(data))
    return folder


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_error_line_exit_2_and_nothing_written(case, tmp_path, capsys):
    make, named = CASES[case]
    d = tmp_path / "in"
    d.mkdir()
    write(d / "g.txt", EDGES)
    source, target, extra = make(d)
    work = tmp_path / "work"
    work.mkdir()
    code = cli.main(["-q", "align", str(source), str(target), "--out", str(work / "out"),
                     *map(str, extra)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: "), err
    for word in named:
        assert word in err[0], (word, err[0])
    assert list(work.iterdir()) == []


def test_duplicate_and_self_loop_edges_are_accepted_counted_and_reported(tmp_path, capsys):
    g = write(tmp_path / "g.txt", EDGES + "a b\nb a\nc c\n")
    out = tmp_path / "out"
    assert cli.main(["-q", "align", str(g), str(g), "--out", str(out)]) == 0
    stats = json.loads((out / "metrics.json").read_text())["input_stats"]["source"]
    assert stats == {"input_edges": 8, "self_loops": 1, "duplicate_edges": 1}
    assert pq.read_table(out / "matches").num_rows == 4


def test_an_unreachable_ray_address_fails_naming_it(tmp_path, capsys, monkeypatch):
    from tfgm_dist.distributed import cluster
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 2.0)  # 60 s in production
    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)  # a shared cluster
    g = write(tmp_path / "g.txt", EDGES)
    code = cli.main(["-q", "align", str(g), str(g), "--out", str(tmp_path / "out"),
                     "--partitions", "2", "--ray-address", "127.0.0.1:1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert "127.0.0.1:1" in err[0] and "nothing answered" in err[0]
    assert not (tmp_path / "out").exists()


def test_a_second_writer_to_the_same_output_fails_cleanly(tmp_path, capsys):
    from tfgm_dist.write import location, locked
    g = write(tmp_path / "g.txt", EDGES)
    out = tmp_path / "out"
    with locked(location(out)):  # another run holds the output
        code = cli.main(["-q", "align", str(g), str(g), "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "another run is writing" in err[0]
    assert not out.exists()
    assert cli.main(["-q", "align", str(g), str(g), "--out", str(out)]) == 0  # lock released
    assert not (tmp_path / ".out.lock").exists()
    capsys.readouterr()
    assert cli.main(["-q", "align", str(g), str(g), "--out", str(out)]) == 2
    assert "holds a previous run" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_exit_130(tmp_path, capsys, monkeypatch):
    from tfgm_dist import job

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(job.auto, "align", interrupted)
    g = write(tmp_path / "g.txt", EDGES)
    code = cli.main(["-q", "align", str(g), str(g), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 130 and len(err) == 1 and err[0].startswith("error: interrupted")
    assert list(tmp_path.iterdir()) == [g]  # no output, no staging, no lock left


def test_the_output_at_the_filesystem_root_is_refused_without_walking_it(tmp_path, capsys):
    g = write(tmp_path / "g.txt", EDGES)
    assert cli.main(["-q", "align", str(g), str(g), "--out", "/"]) == 2
    assert "not empty and holds no tfgm-dist result" in capsys.readouterr().err


@pytest.mark.parametrize("out_format", ["parquet", "delta"])
def test_a_full_disk_is_one_error_line_naming_the_file_exit_1(tmp_path, capsys, monkeypatch,
                                                              out_format):
    """The write of the matches fails as a full disk fails it (ENOSPC, naming the file)."""
    import errno
    from tfgm_dist import write as write_stage

    def disk_full(table, where, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", where)
    monkeypatch.setattr(write_stage.pq, "write_table", disk_full)
    g = write(tmp_path / "g.txt", EDGES)
    out = tmp_path / "out"
    code = cli.main(["-q", "align", str(g), str(g), "--out", str(out),
                     "--out-format", out_format])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("error: ") and err[0].endswith(
        "matches/part-00000.parquet: No space left on device")
    # no output, staging or lock: only the checkpoint, so that the rerun with space resumes
    assert sorted(p.name.split("-")[0] for p in tmp_path.iterdir()) == [".out.resume", "g.txt"]
    monkeypatch.undo()
    assert cli.main(["-q", "align", str(g), str(g), "--out", str(out),
                     "--out-format", out_format]) == 0
    assert "resume" in json.loads(capsys.readouterr().out)["seconds"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.txt", "out"]


def test_an_output_folder_that_cannot_be_written_is_one_error_line_naming_it(tmp_path, capsys):
    """A parent folder refusing new files (sysfs refuses them even to root, where a read-only
    chmod would not stop this test's user): one line naming the path, exit 1, no traceback."""
    if not Path("/sys").is_dir():
        pytest.skip("no /sys (not Linux): no folder this user cannot write to")
    try:
        (Path("/sys") / "tfgm-probe").touch()
    except OSError:
        pass
    else:
        pytest.skip("/sys accepts new files here: no folder this user cannot write to")
    g = write(tmp_path / "g.txt", EDGES)
    code = cli.main(["-q", "align", str(g), str(g), "--out", "/sys/tfgm-out"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("error: /sys/")
    assert "Permission denied" in err[0] or "Read-only file system" in err[0]
    assert list(tmp_path.iterdir()) == [g]
