"""Benchmark the single-machine engine on the real benchmarks, on their published protocols.

    python -m jobs.bench_engine                      # everything (about 15 min on 2 cores)
    python -m jobs.bench_engine --only yeast --runs 10
    python -m jobs.bench_engine --only dbp15k --pairs zh_en --encoder
    python -m jobs.bench_engine --only raw           # DBP15k's files as shipped
    python -m jobs.bench_engine --only structure     # DBP15k's triples without names
    python -m jobs.bench_engine --only structure --set embed.relations=false  # side by side
    python -m jobs.bench_engine --only openea        # DBP15k in OpenEA's files, every target
    python -m jobs.bench_engine --only named --nodes 100000   # a synthetic named pair

Prints Markdown tables (accuracy against the paper, seconds per stage, peak memory). Every
configuration runs in a fresh process so that its peak RSS is its own. Protocols are those
of ``../shared/data/README.md``:

- DBP15k: seeds = the first 4,500 lines of ``ref_ent_ids``, test = the other 10,500; each test
  source is ranked against the 10,500 test targets (``--candidates``/``--queries``); features
  are the translated entity names only.
- Yeast: source yeast0, target yeast{p} with its nodes renumbered by a seeded permutation (a
  different one per run), gold = the identity of protein ids; node correctness of the
  Hungarian one-to-one assignment, 10 runs per noise level.

The yeast table and the end-to-end tables run with no config file, as a new user does: the
job chooses its settings (:mod:`tfgm_dist.auto`). The end-to-end tables run the real
``tfgm-dist align`` command (new process: interpreter start, imports, load, all stages,
Parquet write) on inputs prepared once in the Parquet layout, with and without seeds; the
``raw`` tables on DBP15k's own files, whose only names are the URIs' local names; the
``structure`` tables on its triples alone (no ``ent_ids`` beside them: no names); the
``openea`` tables on the same entities in OpenEA's layout (triples of URIs, links of URIs,
each test source ranked against every target: no ``--queries``/``--candidates``). The
``--only dbp15k`` table is the ablation over refinement and decodings, with the settings of
``jobs/configs/dbp15k.toml``. ``named`` is a knowledge graph's size and kind beyond DBP15k's
(:func:`named_pair`, 100,000 entities a side as DWY100k has), end to end with 30 % seeds.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import numpy as np

from jobs import warn_uncompiled

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CONFIGS = Path(__file__).resolve().parent / "configs"

PAPER_DBP = {"zh_en": 81.4, "ja_en": 86.2, "fr_en": 94.9}  # TFGMws DGMC Hits@1
PAPER_YEAST = {5: 83.6, 10: 78.6, 15: 72.4, 20: 62.4, 25: 50.1}  # DGMC pos-enc
DECODINGS = [("argmax", "auto"), ("mutual", "auto"), ("one-to-one", "sparse"),
             ("one-to-one", "sinkhorn")]


def _in_child(fn, *args):
    """Run ``fn(*args)`` in a fresh spawned process; returns its result.

    The child imports PyG first, as ``tfgm-dist`` does before its stages (``run_job`` records
    the library versions): the library imports it only when it first builds an operator (so
    that Ray workers do not), and its 2.6 s would otherwise be the first run's."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"),
                             initializer=importlib.import_module,
                             initargs=("torch_geometric",)) as pool:
        return pool.submit(fn, *args).result()


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _dbp_config(encoder: bool, refine: bool):
    from tfgm_dist.config import load_config, with_overrides
    return with_overrides(load_config(CONFIGS / "dbp15k.toml"), **{
        "features.encoder": encoder, "refine.enabled": refine, "assign.method": "mutual"})


def dbp_child(pair_name: str, seeds: bool, refine: bool, encoder: bool) -> dict:
    """One DBP15k setting: load, score once, then every decoding; times and metrics."""
    import torch

    from tfgm_dist.config import AssignConfig
    from jobs.dbp15k import load_dbp15k
    from tfgm_dist.assign import decode
    from tfgm_dist.pipeline import Pair, evaluate, score
    from tfgm_dist.stopwatch import Stopwatch
    cfg = _dbp_config(encoder, refine)
    watch = Stopwatch()
    with watch.stage("load"):
        src, tgt, ref = load_dbp15k(DATA / "dbp15k" / pair_name)
        tgt = tgt.permuted(torch.randperm(tgt.num_nodes,
                                          generator=torch.Generator().manual_seed(cfg.seed)))
        rs, rt = src.index_of(ref["source_id"], "ref"), tgt.index_of(ref["target_id"], "ref")
        pair = Pair(src, tgt, seeds=(rs[:4500], rt[:4500]) if seeds else None,
                    gold=(rs[4500:], rt[4500:]), candidates=rt[4500:], queries=rs[4500:])
    scored = score(pair, cfg, watch)
    rows = []
    for method, solver in DECODINGS:
        start = time.perf_counter()
        matched, _ = decode(scored, AssignConfig(method=method, one_to_one=solver))
        took = time.perf_counter() - start
        m = evaluate(scored.forward.take_rows(scored.rows), scored.rows, matched, pair.gold)
        rows.append({"decoding": method if method != "one-to-one" else f"1:1 {solver}",
                     "hits@1": 100 * m["hits@1"], "hits@10": 100 * m["hits@10"],
                     "mrr": m["mrr"], "accuracy": 100 * m["accuracy"], "decode_s": took})
    # The headline setting is also ranked against every non-seed target, not only the
    # 10,500 test targets (another search and refinement: done once, not per setting).
    m_all = None
    if seeds and refine:
        full = score(Pair(src, tgt, seeds=pair.seeds, gold=pair.gold, queries=pair.queries), cfg)
        m_all = evaluate(full.forward.take_rows(full.rows), full.rows,
                         decode(full, cfg.assign)[0], pair.gold)
    return {"seconds": watch.seconds, "peak": _peak(), "decodings": rows, "all": m_all}


def undirected(edges: np.ndarray) -> np.ndarray:
    """Each undirected edge of ``edges`` ``[E, 2]`` once, as ``(min, max)``; self-loops
    dropped."""
    ends = np.sort(edges, axis=1)
    return np.unique(ends[ends[:, 0] != ends[:, 1]], axis=0)


def edges_kept(source, target, sources: np.ndarray, targets: np.ndarray) -> int:
    """How many of ``source``'s edges a matching (``sources[i]`` to ``targets[i]``) maps onto
    edges of ``target``: the objective the polish maximises, for the gold and for the run."""
    to = np.full(source.num_nodes, -1)
    to[sources] = targets
    u, v = undirected(source.edge_index.numpy().T).T
    mapped = (to[u] >= 0) & (to[v] >= 0)
    n = target.num_nodes
    ends = undirected(np.stack([to[u[mapped]], to[v[mapped]]], 1))
    return int(np.isin(ends @ [n, 1], undirected(target.edge_index.numpy().T) @ [n, 1]).sum())


def yeast_child(noise: int, runs: int) -> dict:
    """``runs`` permuted runs of yeast0 -> yeast{noise} with no config file (the automatic
    choices); accuracy, seconds and the source edges kept, by the run and by the gold, per
    run."""
    from tfgm_dist.auto import align
    from tfgm_dist.config import Config
    from tfgm_dist.load import load_graph
    from tfgm_dist.pipeline import Pair, load_pair
    from tfgm_dist.stopwatch import Stopwatch
    accs, secs, stages, sure, kept = [], [], [], [], []
    for run in range(runs):
        cfg = Config(seed=run)
        watch = Stopwatch()
        start = time.perf_counter()
        with watch.stage("load"):
            src = load_graph(DATA / "yeast_ppi" / "yeast0_Y2H1.txt")
            pair = load_pair(src, DATA / "yeast_ppi" / f"yeast{noise}_Y2H1.txt", cfg)
            gold = tuple(g.index_of(src.ids, "gold") for g in (pair.source, pair.target))
            pair = Pair(pair.source, pair.target, gold=gold)
        result = align(pair, cfg, watch)
        secs.append(time.perf_counter() - start)
        accs.append(100 * result.metrics["accuracy"])
        stages.append(watch.seconds)
        sure.append(result.metrics["reliability"])
        kept.append((edges_kept(pair.source, pair.target, result.rows.numpy(),
                                result.matched.numpy()),
                     edges_kept(pair.source, pair.target, *gold)))
    mean_stage = {k: float(np.mean([s[k] for s in stages])) for k in stages[0]}
    pooled = {c: {"rows": sum(r[c]["rows"] for r in sure),
                  "share_correct": sum((r[c]["share_correct"] or 0) * r[c]["rows"] for r in sure)
                  / max(1, sum(r[c]["rows"] for r in sure))} for c in sure[0]}
    return {"acc": accs, "secs": secs, "stages": mean_stage, "peak": _peak(),
            "reliability": pooled, "kept": kept}


def run_cli(args: list[str]) -> tuple[float, dict]:
    """Wall seconds and metrics of one real ``tfgm-dist align`` process."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tfgm_dist.cli", "-q", "align", *args],
                   check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    out = Path(args[args.index("--out") + 1])
    return wall, json.loads((out / "metrics.json").read_text())


def prepare_dbp(pair_name: str, folder: Path) -> dict[str, Path]:
    """DBP15k in the Parquet input layout (the triples as edges with their relations, the
    translated names) plus seeds/gold/candidates/queries files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from jobs.dbp15k import load_dbp15k, triples
    src, tgt, ref = load_dbp15k(DATA / "dbp15k" / pair_name)
    paths = {}
    for k, (name, g) in enumerate((("source", src), ("target", tgt)), 1):
        d = folder / name
        d.mkdir(parents=True)
        pq.write_table(triples(DATA / "dbp15k" / pair_name, str(k)), d / "edges.parquet")
        pq.write_table(pa.table({"id": g.ids, "name": pa.array(g.names)}), d / "nodes.parquet")
        paths[name] = d
    for name, table in (("seeds", ref.slice(0, 4500)), ("gold", ref.slice(4500))):
        pq.write_table(table, folder / f"{name}.parquet")
        paths[name] = folder / f"{name}.parquet"
    test = ref.slice(4500)
    for name, col in (("queries", "source_id"), ("candidates", "target_id")):
        pq.write_table(pa.table({"id": test[col]}), folder / f"{name}.parquet")
        paths[name] = folder / f"{name}.parquet"
    return paths


def prepare_raw(pair_name: str, folder: Path) -> dict[str, Path]:
    """DBP15k as shipped (``triples_1``, ``triples_2``: the job reads the entities' names from
    the URIs of ``ent_ids_1``, ``ent_ids_2`` beside them, no translated names) plus
    seeds/gold/candidates/queries text files of the protocol's split."""
    pair = DATA / "dbp15k" / pair_name
    lines = (pair / "ref_ent_ids").read_text().splitlines()
    folder.mkdir(parents=True)
    paths = {"source": pair / "triples_1", "target": pair / "triples_2"}
    test = [line.split("\t") for line in lines[4500:]]
    for name, rows in (("seeds", lines[:4500]), ("gold", lines[4500:]),
                       ("queries", [s for s, _ in test]), ("candidates", [t for _, t in test])):
        paths[name] = folder / f"{name}.tsv"
        paths[name].write_text("\n".join(rows) + "\n")
    return paths


def prepare_openea(pair_name: str, folder: Path) -> dict[str, Path]:
    """DBP15k in OpenEA's layout: ``rel_triples_1``, ``rel_triples_2`` of ``head relation
    tail`` URIs, the protocol's 4,500 seed pairs as ``train_links`` and the other 10,500 as
    ``test_links`` (URI pairs); no restriction of the sources written or targets searched."""
    pair = DATA / "dbp15k" / pair_name
    uri = dict(line.split("\t") for k in (1, 2)
               for line in (pair / f"ent_ids_{k}").read_text(encoding="utf-8").splitlines())
    folder.mkdir(parents=True)
    paths = {}
    for k, name in ((1, "source"), (2, "target")):
        triples = (line.split("\t") for line in
                   (pair / f"triples_{k}").read_text(encoding="utf-8").splitlines())
        paths[name] = folder / f"rel_triples_{k}"
        paths[name].write_text("".join(f"{uri[h]}\thttp://example.org/relation/{r}\t{uri[t]}\n"
                                       for h, r, t in triples), encoding="utf-8")
    links = [line.split("\t") for line in (pair / "ref_ent_ids").read_text().splitlines()]
    for name, file, rows in (("seeds", "train_links", links[:4500]),
                             ("gold", "test_links", links[4500:])):
        paths[name] = folder / file
        paths[name].write_text("".join(f"{uri[s]}\t{uri[t]}\n" for s, t in rows),
                               encoding="utf-8")
    return paths


def prepare_structure(pair_name: str, folder: Path) -> dict[str, Path]:
    """DBP15k's triples without their ``ent_ids`` (so without names: structure, relations
    and seeds alone, as a knowledge graph whose entities are codes) plus the protocol's
    seeds/gold/candidates/queries text files."""
    paths = prepare_raw(pair_name, folder)
    for side in ("source", "target"):
        copy = folder / paths[side].name
        copy.write_bytes(paths[side].read_bytes())
        paths[side] = copy
    return paths


LAYOUTS = {"translated": (prepare_dbp, ""), "raw": (prepare_raw, ", the files as shipped: "
                                                   "names from the URIs"),
           "structure": (prepare_structure, ", the triples alone: no names"),
           "openea": (prepare_openea, ", in OpenEA's files: names from the URIs, ranked "
                                      "against every target")}


def fmt_reliability(m: dict) -> str:
    """``share correct (rows)`` at each confidence level of ``metrics.json``'s reliability."""
    levels = m.get("reliability", {})
    return " / ".join(f"{v['share_correct']:.2f} ({v['rows']})" if v["rows"] else "- (0)"
                      for v in levels.values()) or "-"


def _vs_all(m: dict | None) -> str:
    return "-" if m is None else f"{100 * m['hits@1']:.1f} / {100 * m['hits@10']:.1f}"


def _fmt_s(seconds: dict) -> str:
    return " ".join(f"{k} {v:.1f}" for k, v in seconds.items() if k != "total")


def bench_dbp(pairs: list[str], encoder: bool) -> None:
    print(f"\n### DBP15k (features: bigrams{' + MiniLM' if encoder else ''}; "
          "Hits in %, ranked against the 10,500 test targets)\n")
    print("| pair | seeds | refine | decoding | Hits@1 | Hits@10 | MRR | 1:1 acc. | paper H@1 "
          "| H@1 / H@10 vs all targets | seconds per stage | decode s | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for pair_name in pairs:
        for seeds in (False, True):
            for refine in (False, True):
                r = _in_child(dbp_child, pair_name, seeds, refine, encoder)
                for d in r["decodings"]:
                    print(f"| {pair_name} | {'yes' if seeds else 'no'} | "
                          f"{'yes' if refine else 'no'} | {d['decoding']} | {d['hits@1']:.1f} | "
                          f"{d['hits@10']:.1f} | {d['mrr']:.3f} | {d['accuracy']:.1f} | "
                          f"{PAPER_DBP[pair_name] if seeds else '-'} | "
                          f"{_vs_all(r['all'])} | "
                          f"{_fmt_s(r['seconds'])} | "
                          f"{d['decode_s']:.1f} | {r['peak'] / 2**30:.2f} GiB |", flush=True)


def protocol_args(p: dict[str, Path]) -> list[str]:
    """``tfgm-dist align``'s inputs of a prepared layout (:data:`LAYOUTS`): the graphs, the
    gold, and the test sources and targets where the layout restricts to them."""
    return [str(p["source"]), str(p["target"]), "--gold", str(p["gold"])] + [
        arg for key in ("candidates", "queries") if key in p for arg in (f"--{key}", str(p[key]))]


def bench_dbp_end_to_end(pairs: list[str], seeds: bool, layout: str = "translated",
                         sets: tuple[str, ...] = ()) -> None:
    """``sets``: ``KEY=VALUE`` settings passed to every run (``--set``), an ablation."""
    prepare, title = LAYOUTS[layout]
    print(f"\n### DBP15k end to end (`tfgm-dist align`, new process, no config file, "
          f"{'with' if seeds else 'without'} seeds{title}"
          f"{''.join(f', --set {kv}' for kv in sets)})\n")
    print("| pair | wall s | Hits@1 | Hits@10 | MRR | 1:1 acc. | estimated H@1 (held out) "
          "| content | seconds per stage | peak RSS | share correct (rows) at confidence "
          ">= 0.5 / 0.8 / 0.9 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for pair_name in pairs:
        with tempfile.TemporaryDirectory() as tmp:
            p = prepare(pair_name, Path(tmp) / "in")
            args = protocol_args(p) + ["--out", f"{tmp}/out"]
            wall, m = run_cli(args + (["--seeds", str(p["seeds"])] if seeds else [])
                              + [arg for kv in sets for arg in ("--set", kv)])
        est = m.get("estimate", {})
        guess = (f"{100 * est['hits@1']:.1f} ({est['held_out']})" if "held_out" in est
                 else "-")
        print(f"| {pair_name} | {wall:.1f} | {100 * m['hits@1']:.1f} | {100 * m['hits@10']:.1f} | "
              f"{m['mrr']:.3f} | {100 * m['accuracy']:.1f} | {guess} | {m['auto']['kind']} | "
              f"{_fmt_s(m['seconds'])} | "
              f"{m['peak_rss_bytes'] / 2**30:.2f} GiB | {fmt_reliability(m)} |", flush=True)


def named_pair(n: int, folder: Path, seed: int = 0) -> dict[str, Path]:
    """A synthetic pair of named graphs in the Parquet layout, with 30 % of its pairs as
    seeds and the rest as gold: a Chung-Lu graph (mean degree 8) and a copy keeping 85 % of
    its edges, renumbered; every entity named by 1-3 words of a 20,000-word invented
    vocabulary, and its copy's name given a changed letter (30 %) or a dropped word (10 %),
    as two knowledge graphs' labels of one entity differ."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tfgm_dist.synth import chung_lu
    rng = np.random.default_rng(seed)
    syllables = np.array(["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "an", "el", "or",
                          "us", "ba", "di", "fu", "go", "he", "ja", "ki", "pe", "qu", "wi", "xo"])
    words = np.unique(["".join(rng.choice(syllables, rng.integers(2, 4)))
                       for _ in range(20_000)])
    names = [" ".join(words[rng.integers(0, words.size, rng.integers(1, 4))]).title()
             for _ in range(n)]

    def edited(name: str) -> str:
        if rng.random() < 0.3:
            at = rng.integers(0, len(name))
            name = name[:at] + rng.choice(list("aeiou")) + name[at + 1:]
        parts = name.split()
        if len(parts) > 1 and rng.random() < 0.1:
            parts.pop(rng.integers(0, len(parts)))
        return " ".join(parts)

    edges = chung_lu(n, 8.0, rng)
    kept = edges[:, rng.permutation(edges.shape[1])[:int(0.85 * edges.shape[1])]]
    perm = rng.permutation(n)  # source entity i is target entity perm[i]
    copy = [""] * n
    for i, name in enumerate(names):
        copy[perm[i]] = edited(name)
    paths = {}
    for side, e, labels, prefix in (("source", edges, names, "s"),
                                    ("target", perm[kept], copy, "t")):
        ids = np.char.add(prefix, np.arange(n).astype(str))
        paths[side] = folder / side
        paths[side].mkdir(parents=True)
        pq.write_table(pa.table({"src": ids[e[0]], "dst": ids[e[1]]}),
                       paths[side] / "edges.parquet")
        pq.write_table(pa.table({"id": ids, "name": labels}), paths[side] / "nodes.parquet")
    order = rng.permutation(n)
    s_ids, t_ids = np.char.add("s", order.astype(str)), np.char.add("t", perm[order].astype(str))
    cut = int(0.3 * n)
    for name, rows in (("seeds", slice(0, cut)), ("gold", slice(cut, n))):
        paths[name] = folder / f"{name}.parquet"
        pq.write_table(pa.table({"source_id": s_ids[rows], "target_id": t_ids[rows]}),
                       paths[name])
    return paths


def bench_named(n: int) -> None:
    print(f"\n### A synthetic named pair of {n:,} entities a side, 30 % seeds "
          "(`tfgm-dist align`, new process)\n")
    print("| run | wall s | Hits@1 | 1:1 acc. | estimated H@1 (held out) | seconds per stage "
          "| peak RSS |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        p = named_pair(n, Path(tmp) / "in")
        args = [str(p["source"]), str(p["target"]), "--seeds", str(p["seeds"]),
                "--gold", str(p["gold"])]
        os.environ["TFGM_CACHE"] = f"{tmp}/cache"  # the first run encodes every name
        for i, (run, extra) in enumerate((
                ("no config, first run", []), ("no config, names cached", []),
                ("`--set search.index=ivfpq`, names cached",
                 ["--set", "search.index=ivfpq", "--set", "search.k=10"]))):
            wall, m = run_cli(args + extra + ["--out", f"{tmp}/out{i}"])
            est = m["estimate"]
            print(f"| {run} | {wall:.1f} | {100 * m['hits@1']:.2f} | {100 * m['accuracy']:.2f} "
                  f"| {100 * est['hits@1']:.2f} ({est['held_out']}) | {_fmt_s(m['seconds'])} "
                  f"| {m['peak_rss_bytes'] / 2**30:.2f} GiB |", flush=True)


def bench_yeast(runs: int) -> None:
    print(f"\n### Yeast PPI (node correctness %, one-to-one, {runs} permuted runs; "
          "no config file)\n")
    print("| noise | mean ± std | min – max | paper | s per run (mean / median) "
          "| seconds per stage (mean) | peak RSS | share correct (rows) at confidence "
          ">= 0.5 / 0.8 / 0.9, all runs | source edges kept, run / gold (mean) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for noise in (5, 10, 15, 20, 25):
        r = _in_child(yeast_child, noise, runs)
        acc, secs = np.array(r["acc"]), np.array(r["secs"])
        print(f"| {noise} % | {acc.mean():.1f} ± {acc.std():.1f} | {acc.min():.1f} – "
              f"{acc.max():.1f} | {PAPER_YEAST[noise]} | {secs.mean():.2f} / "
              f"{np.median(secs):.2f} | {_fmt_s(r['stages'])} | {r['peak'] / 2**20:.0f} MiB | "
              f"{fmt_reliability(r)} | {np.mean([k[0] for k in r['kept']]):,.1f} / "
              f"{np.mean([k[1] for k in r['kept']]):,.1f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", choices=("yeast", "dbp15k", "end-to-end", "raw", "structure",
                                       "openea", "named"))
    p.add_argument("--pairs", default="zh_en,ja_en,fr_en")
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--encoder", action="store_true", help="add MiniLM sentence vectors")
    p.add_argument("--nodes", type=int, default=100_000, help="named: entities a side")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="passed to every end-to-end run (an ablation beside the defaults)")
    args = p.parse_args()
    if not DATA.exists():
        sys.exit(f"benchmark data not found at {DATA}")
    pairs = args.pairs.split(",")
    threads = os.environ.get("OMP_NUM_THREADS", "default")
    print(f"machine: {os.cpu_count()} cores, torch threads {threads}")
    warn_uncompiled()
    if args.only in (None, "yeast"):
        bench_yeast(args.runs)
    if args.only in (None, "dbp15k"):
        bench_dbp(pairs, args.encoder)
    sets = tuple(args.set)
    for layout in ("translated", "raw", "structure", "openea"):
        if args.only in (None, "end-to-end" if layout == "translated" else layout):
            bench_dbp_end_to_end(pairs, seeds=True, layout=layout, sets=sets)
            bench_dbp_end_to_end(pairs, seeds=False, layout=layout, sets=sets)
    if args.only == "named":  # not in "everything": about 10 minutes
        bench_named(args.nodes)


if __name__ == "__main__":
    main()
