"""The ``tfgm-dist`` command line through ``cli.main``: real files in, real Parquet out.

Covers a full yeast run with refinement and Hungarian assignment, determinism, the
semi-supervised path, candidate/query restriction, top-k output, every bad-input exit, the
output-folder safety rules and the ``synth`` / ``demo`` subcommands.
"""
from __future__ import annotations

import hashlib
import subprocess
import sys
import json
from datetime import datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import torch

from tfgm_dist import cli
from tfgm_dist.load import load_graph, load_pairs
from tfgm_dist.synth import write_pair

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
YEAST = DATA / "yeast_ppi"
needs_yeast = pytest.mark.skipif(not (YEAST / "yeast5_Y2H1.txt").is_file(),
                                 reason=f"yeast PPI benchmark not found under {YEAST}")

YEAST_TOML = """\
[features]
kind = "degree-sinusoidal"

[embed]
layers = 10
self_loops = false
include_input = false
bias = 1.0

[search]
k = 100

[refine]
enabled = true
steps = 20
dim = 64
include_input = false

[assign]
one_to_one = "hungarian"
"""
STAGES = {"load", "features", "embed", "search", "refine", "assign", "write", "total"}


def write_columns(path: Path, *columns) -> Path:
    path.write_text("".join("\t".join(str(v) for v in row) + "\n" for row in zip(*columns)))
    return path


def read_matches(out: Path) -> pa.Table:
    table = ds.dataset(out / "matches", format="parquet").to_table()
    return table.sort_by([("source_id", "ascending"), ("rank", "ascending")])


def metrics_of(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def hidden(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def align(source, target, out, *options) -> int:
    return cli.main(["-q", "align", str(source), str(target), "--out", str(out),
                     *map(str, options)])


# ---------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> dict[str, Path]:
    return write_pair(tmp_path_factory.mktemp("synth"), n=2000)


@pytest.fixture(scope="module")
def gold(synth) -> pa.Table:
    return pq.read_table(synth["gold"])


@pytest.fixture(scope="module")
def yeast(tmp_path_factory):
    """One full yeast0 vs yeast5 run; returns the inputs and the output folder."""
    root = tmp_path_factory.mktemp("yeast")
    inputs = {"src": YEAST / "yeast0_Y2H1.txt", "tgt": YEAST / "yeast5_Y2H1.txt",
              "gold": write_columns(root / "gold.tsv", range(1004), range(1004)),
              "cfg": root / "yeast.toml"}
    inputs["cfg"].write_text(YEAST_TOML)

    def run(out: Path, *extra) -> int:
        return align(inputs["src"], inputs["tgt"], out, "--gold", inputs["gold"],
                     "--assign", "one-to-one", "--config", inputs["cfg"], *extra)

    out = root / "run"
    code = run(out)
    return {"root": root, "out": out, "code": code, "run": run, **inputs}


# ---------------------------------------------------------------------------------------------
# A real run on the yeast networks


@needs_yeast
def test_yeast_run_writes_metrics_matches_and_manifest(yeast):
    out = yeast["out"]
    assert yeast["code"] == 0
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "matches", "metrics.json"]
    assert hidden(yeast["root"]) == []  # no staging folder left beside the output

    m = metrics_of(out)
    assert {"hits@1", "hits@10", "mrr", "accuracy", "seconds", "peak_rss_bytes"} <= set(m)
    assert STAGES <= set(m["seconds"])
    assert all(v >= 0 for v in m["seconds"].values())
    assert m["seconds"]["total"] >= m["seconds"]["refine"] + m["seconds"]["search"]
    assert m["peak_rss_bytes"] > 10 * 2**20
    assert m["schema_version"] == "tfgm-dist/metrics/2" and len(m["run_id"]) == 32
    started, finished = (datetime.fromisoformat(m[k]) for k in ("started_at", "finished_at"))
    assert started.tzinfo is not None and started <= finished
    assert m["accuracy"] > 0.5, m  # chance is 0.1 %; the paper reports ~84 % at 5 % noise
    assert m["hits@10"] >= m["hits@1"] and 0 < m["mrr"] <= 1

    table = read_matches(out)
    assert table.column_names == ["source_id", "target_id", "rank", "score", "confidence"]
    assert table.num_rows == 1004
    assert table.column("source_id").to_pylist() == list(range(1004))  # the user's int ids
    assert set(table.column("rank").to_pylist()) == {1}
    targets = table.column("target_id").to_pylist()
    assert len(set(targets)) == 1004 and set(targets) <= set(range(1004))  # one-to-one
    correct = np.mean(np.array(targets) == np.arange(1004))
    assert correct == pytest.approx(m["accuracy"])  # the metrics describe the written rows

    manifest = json.loads((out / "manifest.json").read_text())
    (entry,) = manifest["files"]
    assert entry["rows"] == 1004
    assert (out / entry["path"]).is_file()
    assert entry["bytes"] == (out / entry["path"]).stat().st_size
    assert pq.ParquetFile(out / entry["path"]).metadata.num_rows == 1004
    assert manifest["config"]["refine"]["steps"] == 20
    assert manifest["config"]["assign"]["method"] == "one-to-one"
    src_sha = hashlib.sha256(yeast["src"].read_bytes()).hexdigest()
    assert manifest["inputs"]["source"]["sha256"] == src_sha


@needs_yeast
def test_yeast_run_is_deterministic_for_a_seed(yeast):
    again = yeast["root"] / "again"
    assert yeast["run"](again) == 0
    assert read_matches(again).equals(read_matches(yeast["out"]))
    assert metrics_of(again)["accuracy"] == metrics_of(yeast["out"])["accuracy"]


@needs_yeast
def test_yeast_run_with_another_seed(yeast):
    other = yeast["root"] / "seed7"
    assert yeast["run"](other, "--seed", "7") == 0
    table = read_matches(other)
    assert table.num_rows == 1004
    assert len(set(table.column("target_id").to_pylist())) == 1004
    assert metrics_of(other)["accuracy"] > 0.5
    assert json.loads((other / "manifest.json").read_text())["config"]["seed"] == 7


# ---------------------------------------------------------------------------------------------
# Seeds, candidates, queries, top-k


def semi_supervised_inputs(tmp_path: Path, gold: pa.Table) -> dict[str, Path]:
    n_seeds = int(0.3 * gold.num_rows)
    s, t = gold.column(0).to_pylist(), gold.column(1).to_pylist()
    # Degree features only: the given vectors make the synthetic pair too easy for seeds to matter.
    # No bootstrapping and no polish, which the seedless run would get unconditionally and the
    # seeded one if the held-out seeds gain: seeds are compared at equal settings.
    # 20 refinement steps over 50 candidates, not the small-graph 100 over 200: 3x faster.
    (tmp_path / "deg.toml").write_text('[features]\nkind = "degree-sinusoidal"\n'
                                       '[bootstrap]\nrounds = 0\n[refine]\nsteps = 20\n'
                                       '[search]\nk = 50\n[assign]\npolish = false\n')
    return {"seeds": write_columns(tmp_path / "seeds.tsv", s[:n_seeds], t[:n_seeds]),
            "rest": write_columns(tmp_path / "rest.tsv", s[n_seeds:], t[n_seeds:]),
            "cfg": tmp_path / "deg.toml", "n_seeds": n_seeds}


def plain_and_seeded(synth, tmp_path, f, gold_file):
    """Metrics of the same run without and with ``--seeds``, scored against ``gold_file``."""
    common = ("--gold", gold_file, "--config", f["cfg"])
    assert align(synth["source"], synth["target"], tmp_path / "plain", *common) == 0
    assert align(synth["source"], synth["target"], tmp_path / "seeded", *common,
                 "--seeds", f["seeds"]) == 0
    return metrics_of(tmp_path / "plain"), metrics_of(tmp_path / "seeded")


def test_seeds_do_not_hurt_and_seed_sources_are_not_output(synth, gold, tmp_path):
    f = semi_supervised_inputs(tmp_path, gold)
    plain, seeded = plain_and_seeded(synth, tmp_path, f, f["rest"])
    assert seeded["accuracy"] >= plain["accuracy"], (seeded, plain)
    assert seeded["hits@1"] >= plain["hits@1"]

    rows = read_matches(tmp_path / "seeded")
    seed_sources = set(gold.column(0).to_pylist()[:f["n_seeds"]])
    seed_targets = set(gold.column(1).to_pylist()[:f["n_seeds"]])
    assert rows.num_rows == gold.num_rows - f["n_seeds"]
    assert not seed_sources & set(rows.column("source_id").to_pylist())
    assert not seed_targets & set(rows.column("target_id").to_pylist())

    # a gold file that also holds the seed pairs scores the same rows: seeds are not output
    assert align(synth["source"], synth["target"], tmp_path / "all-gold", "--gold",
                 synth["gold"], "--config", f["cfg"], "--seeds", f["seeds"]) == 0
    assert metrics_of(tmp_path / "all-gold")["accuracy"] == seeded["accuracy"]


def test_candidates_restrict_every_output_target(synth, gold, tmp_path):
    rng = np.random.default_rng(0)
    targets = gold.column(1).to_pylist()
    subset = sorted(rng.choice(targets, size=700, replace=False).tolist())
    cand = write_columns(tmp_path / "cand.txt", subset)
    out = tmp_path / "out"
    assert align(synth["source"], synth["target"], out, "--candidates", cand,
                 "--top-k", "3", "--gold", synth["gold"], "--assign", "argmax") == 0
    rows = read_matches(out)
    assert rows.num_rows == 3 * 2000  # every source still answers, from the subset only
    assert set(rows.column("target_id").to_pylist()) <= set(subset)
    # Sources whose true target was offered still find it.
    offered = {s for s, t in zip(gold.column(0).to_pylist(), targets) if t in set(subset)}
    firsts = {s: t for s, t, r in zip(*(rows.column(c).to_pylist()
                                        for c in ("source_id", "target_id", "rank"))) if r == 1}
    truth = dict(zip(gold.column(0).to_pylist(), targets))
    assert sum(firsts[s] == truth[s] for s in offered) > 0.95 * len(offered)


def test_queries_restrict_the_output_sources(synth, gold, tmp_path):
    queries = gold.column(0).to_pylist()[::7]
    q = write_columns(tmp_path / "queries.txt", queries)
    out = tmp_path / "out"
    assert align(synth["source"], synth["target"], out, "--queries", q) == 0
    rows = read_matches(out)
    assert rows.num_rows == len(queries)
    assert sorted(rows.column("source_id").to_pylist()) == sorted(queries)


def test_top_k_writes_ranked_rows_with_non_increasing_scores(synth, tmp_path):
    out = tmp_path / "top5"
    assert align(synth["source"], synth["target"], out, "--top-k", "5") == 0
    rows = read_matches(out).to_pydict()
    by_source: dict[str, list] = {}
    for s, t, r, sc in zip(rows["source_id"], rows["target_id"], rows["rank"], rows["score"]):
        by_source.setdefault(s, []).append((r, t, sc))
    assert len(by_source) == 2000
    for s, ranked in by_source.items():
        ranks = [r for r, _, _ in ranked]
        assert 1 <= len(ranked) <= 5
        assert ranks == list(range(1, len(ranked) + 1)), s
        scores = [sc for _, _, sc in ranked]
        assert all(a >= b for a, b in zip(scores, scores[1:])), (s, scores)
        assert len({t for _, t, _ in ranked}) == len(ranked)
    assert all(len(v) == 5 for v in by_source.values())  # 50 candidates each: 5 rows each
    assert json.loads((out / "manifest.json").read_text())["files"][0]["rows"] == 5 * 2000

    one = tmp_path / "top1"
    assert align(synth["source"], synth["target"], one) == 0
    firsts = read_matches(one)
    assert firsts.column("target_id").to_pylist() == \
        [by_source[s][0][1] for s in firsts.column("source_id").to_pylist()]


@pytest.mark.parametrize("method", ["argmax", "mutual", "one-to-one"])
def test_every_decoding_runs_from_the_command_line(synth, tmp_path, method):
    """Each --assign method; the one-to-one solvers are tested on the same input in
    test_pipeline (here the sparse and Sinkhorn auctions took 15 s of the suite)."""
    cfg = tmp_path / "c.toml"
    # Degree features only and no bootstrapping, so that best targets collide and uniqueness is
    # not automatic; no polish, so that the matching is the decoder's (and 16 s are saved).
    cfg.write_text('[features]\nkind = "degree-sinusoidal"\n[search]\nk = 20\n'
                   '[bootstrap]\nrounds = 0\n[assign]\npolish = false\n')
    out = tmp_path / "out"
    assert align(synth["source"], synth["target"], out, "--assign", method, "--config", cfg,
                 "--gold", synth["gold"]) == 0
    rows = read_matches(out)
    sources = rows.column("source_id").to_pylist()
    targets = [t for t in rows.column("target_id").to_pylist() if t is not None]
    assert len(set(sources)) == len(sources) == 2000  # unmatched sources: a null target
    assert metrics_of(out)["accuracy"] > 0.3
    if method == "argmax":
        assert len(sources) == 2000 and len(set(targets)) < 1900  # collisions do happen
    else:
        assert len(set(targets)) == len(targets) > 500  # no target twice
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["assign"]["method"] == method


# ---------------------------------------------------------------------------------------------
# Bad input: exit 2, one error line, nothing written


def _graph(path: Path) -> Path:
    path.write_text("0 1\n1 2\n2 3\n3 0\n0 2\n")
    return path


BAD_INPUTS = {
    # name: (files to create {name: text}, extra args, source, what the error line names)
    "missing source": ({}, [], "absent.txt", ["absent.txt", "no such file"]),
    "malformed edge line": ({"bad.txt": "0 1\n1 2\n2 3 4 5\n3 0\n"}, [], "bad.txt",
                            ["bad.txt", "line 3"]),
    "non-numeric weight": ({"w.txt": "0 1 1.0\n1 2 heavy\n2 0 1.0\n"}, [], "w.txt",
                           ["w.txt", "line 2", "heavy"]),
    "seed naming an unknown id": ({"seeds.tsv": "0\t0\n1\t1\n99\t2\n"},
                                  ["--seeds", "{d}/seeds.tsv"], "g.txt",
                                  ["seeds.tsv", "line 3", "99"]),
    "config with an unknown key": ({"c.toml": "[embed]\nlayers = 2\nlayrs = 3\n"},
                                   ["--config", "{d}/c.toml"], "g.txt",
                                   ["c.toml", "embed.layrs"]),
    "top-k zero": ({}, ["--top-k", "0"], "g.txt", ["top_k"]),
    "top-k above search.k": ({}, ["--top-k", "51"], "g.txt", ["top_k", "search.k"]),
    **({} if torch.cuda.is_available() else {  # before the load: a GPU asked for, not there
        "device = cuda without a GPU": ({}, ["--set", "device=cuda"], "absent.txt",
                                        ["device = cuda", "no CUDA GPU"])}),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_error_line_and_writes_nothing(case, tmp_path, capsys):
    files, extra, source, named = BAD_INPUTS[case]
    data = tmp_path / "in"
    data.mkdir()
    _graph(data / "g.txt")
    for name, text in files.items():
        (data / name).write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    out = work / "result"
    code = align(data / source, data / "g.txt", out, *(a.format(d=data) for a in extra))
    captured = capsys.readouterr()
    assert code == 2
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, captured.err
    assert captured.err.strip().splitlines()[-1] == errors[0]
    for word in named:
        assert word in errors[0], (word, errors[0])
    assert not out.exists()
    assert list(work.iterdir()) == []  # no hidden staging folder either


def test_unknown_subcommand_option_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["align", "a.txt", "b.txt", "--out", str(tmp_path / "o"), "--assign", "best"])
    assert e.value.code == 2
    assert "--assign" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------------------------
# Output safety


def test_a_foreign_non_empty_folder_is_never_written_into(synth, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    before = snapshot(out)
    for extra in ([], ["--overwrite"]):
        assert align(synth["source"], synth["target"], out, *extra) == 2
        err = capsys.readouterr().err
        assert "error:" in err and str(out) in err and "not empty" in err
        assert snapshot(out) == before
    assert hidden(tmp_path) == []


def test_a_previous_run_is_replaced_only_with_overwrite(synth, tmp_path, capsys):
    out = tmp_path / "run"
    assert align(synth["source"], synth["target"], out) == 0
    (out / "stray.txt").write_text("left by someone")
    before = snapshot(out)
    capsys.readouterr()

    assert align(synth["source"], synth["target"], out, "--top-k", "2") == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--overwrite" in err
    assert snapshot(out) == before

    assert align(synth["source"], synth["target"], out, "--top-k", "2", "--overwrite") == 0
    assert not (out / "stray.txt").exists()  # the whole previous result is replaced
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["top_k"] == 2 and manifest["files"][0]["rows"] == 2 * 2000
    assert read_matches(out).num_rows == 2 * 2000
    assert hidden(tmp_path) == []  # neither staging nor the old result is left behind


def test_a_failed_overwrite_keeps_the_previous_run(synth, tmp_path, capsys):
    out = tmp_path / "run"
    assert align(synth["source"], synth["target"], out) == 0
    before = snapshot(out)
    bad_seeds = write_columns(tmp_path / "seeds.tsv", ["s0", "s_missing"], ["t0", "t1"])
    capsys.readouterr()
    assert align(synth["source"], synth["target"], out, "--seeds", bad_seeds,
                 "--overwrite") == 2
    assert "s_missing" in capsys.readouterr().err
    assert snapshot(out) == before
    assert hidden(tmp_path) == []


def test_an_empty_existing_folder_is_used(synth, tmp_path):
    out = tmp_path / "empty"
    out.mkdir()
    assert align(synth["source"], synth["target"], out) == 0
    assert read_matches(out).num_rows == 2000
    assert hidden(tmp_path) == []


# ---------------------------------------------------------------------------------------------
# synth and demo


def test_synth_writes_a_pair_that_loads(tmp_path, capsys):
    out = tmp_path / "pair"
    assert cli.main(["-q", "synth", str(out), "--nodes", "500"]) == 0
    paths = json.loads(capsys.readouterr().out)
    assert {Path(paths[k]) for k in ("source", "target", "gold")} == \
        {out / "source", out / "target", out / "gold.parquet"}
    source, target = load_graph(out / "source"), load_graph(out / "target")
    assert source.num_nodes == target.num_nodes == 500
    assert source.num_edges > 1000 and target.num_edges > 1000
    assert source.features.shape == (500, 128)
    gold_s, gold_t = load_pairs(out / "gold.parquet", source, target, "gold")
    assert len(gold_s) == 500 and len(set(gold_t.tolist())) == 500
    # The gold pairs are a real correspondence: matched nodes have near-equal feature vectors.
    near = (source.features[gold_s] - target.features[gold_t]).norm(dim=1)
    far = (source.features[gold_s] - target.features[np.roll(gold_t, 1)]).norm(dim=1)
    assert (near < far).float().mean() > 0.95


def test_demo_aligns_a_synthetic_pair(tmp_path):
    out = tmp_path / "demo"
    assert cli.main(["-q", "demo", "--nodes", "2000", "--out", str(out)]) == 0
    m = metrics_of(out)
    assert m["accuracy"] > 0.8, m
    assert read_matches(out).num_rows == 2000
    assert (out / "manifest.json").is_file()
    assert hidden(tmp_path) == []


def test_inputs_and_output_may_be_filesystem_uris(synth, tmp_path):
    out = tmp_path / "lake" / "run"
    out.parent.mkdir()
    assert align(f"file://{synth['source']}", f"file://{synth['target']}", f"file://{out}",
                 "--gold", f"file://{synth['gold']}") == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["inputs"]["source"]["path"] == f"file://{synth['source']}"
    assert metrics_of(out)["hits@1"] > 0.5


def test_an_input_uri_that_does_not_exist_is_one_error_line(tmp_path, capsys):
    out = tmp_path / "out"
    assert align("mock:///lake/source", "mock:///lake/target", out) == 2
    assert capsys.readouterr().err.strip() == "error: mock:///lake/source: no such file or folder"
    assert not out.exists()


def test_version_prints_the_package_version_and_exits_0(capsys):
    from tfgm_dist import __version__
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"tfgm-dist {__version__}"


def test_set_overrides_any_setting_and_counts_as_the_users(synth, tmp_path):
    out = tmp_path / "out"
    assert align(synth["source"], synth["target"], out, "--set", "search.k=7",
                 "--set", "assign.method=argmax", "--set", "refine.enabled=true") == 0
    config = json.loads((out / "manifest.json").read_text())["config"]
    assert config["search"]["k"] == 7 and config["assign"]["method"] == "argmax"
    assert config["refine"]["enabled"] is True
    assert {"search.k", "assign.method", "refine.enabled"} <= set(config["explicit"])
    assert metrics_of(out)["auto"]["kept_from_user"] == ["assign.method", "refine.enabled",
                                                         "search.k"]


@pytest.mark.parametrize("bad, words", [("search.k", "not KEY=VALUE"),
                                        ("search.nope=1", "unknown key search.nope"),
                                        ("search.k=0", "k")])
def test_a_bad_set_is_one_error_line_exit_2(synth, tmp_path, capsys, bad, words):
    from jobs.align import main as job_main
    job = tmp_path / "job.toml"
    job.write_text("")
    for run in (lambda: align(synth["source"], synth["target"], tmp_path / "o", "--set", bad),
                lambda: job_main(["-q", str(job), "--set", bad])):
        assert run() == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and words in err[0]
    assert not (tmp_path / "o").exists()


def test_columns_map_the_parquet_layout_and_a_bad_mapping_is_refused(synth, tmp_path, capsys):
    renamed = {}
    for side in ("source", "target"):
        folder = tmp_path / side
        folder.mkdir()
        edges = pq.read_table(synth[side] / "edges.parquet")
        pq.write_table(edges.rename_columns(["a", "b"]), folder / "edges.parquet")
        nodes = pq.read_table(synth[side] / "nodes.parquet")
        pq.write_table(nodes.rename_columns(["key" if c == "id" else c
                                             for c in nodes.column_names]),
                       folder / "nodes.parquet")
        renamed[side] = folder
    assert align(renamed["source"], renamed["target"], tmp_path / "plain", "--assign",
                 "argmax") == 2  # no src column under its own name
    capsys.readouterr()
    assert align(renamed["source"], renamed["target"], tmp_path / "out", "--assign", "argmax",
                 "--columns", "src=a,dst=b,id=key") == 0
    assert align(synth["source"], synth["target"], tmp_path / "ref", "--assign", "argmax") == 0
    assert read_matches(tmp_path / "out").equals(read_matches(tmp_path / "ref"))
    assert align(renamed["source"], renamed["target"], tmp_path / "bad",
                 "--columns", "src") == 2
    assert "is not COLUMN=NAME" in capsys.readouterr().err


def test_a_missing_faiss_is_one_error_line_naming_the_extras(tmp_path):
    blocked = ("import sys; sys.modules['faiss'] = None; from tfgm_dist import cli; "
               f"sys.exit(cli.main(['demo', '--out', {str(tmp_path / 'out')!r}]))")
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == ("error: FAISS is not installed: pip install faiss-cpu (or "
                           "faiss-gpu on a CUDA 12 host)\n")
    assert not (tmp_path / "out").exists()
