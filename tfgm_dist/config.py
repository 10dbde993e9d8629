"""The run configuration: every knob of every stage, from a TOML or YAML file or the CLI.

Files are parsed (``tomllib``, ``yaml.safe_load``), never executed. Unknown keys, wrong types
and out-of-range values are rejected with a one-line error naming the file and key.
"""
from __future__ import annotations

import dataclasses
import math
import tomllib
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, get_type_hints

import yaml

from .errors import InputError

FEATURE_KINDS = ("auto", "given", "names", "degree-onehot", "degree-sinusoidal")
ASSIGN_METHODS = ("argmax", "mutual", "one-to-one")
ONE_TO_ONE_SOLVERS = ("auto", "hungarian", "sparse", "sinkhorn")
MAX_K = 4096  # candidates per row; GPU FAISS's own limit is 2048
OPERATORS = ("sum", "mean", "gcn")  # the weight-free layers' graph operators
INDEX_KINDS = ("flat", "ivf", "ivfpq", "hnsw")  # the FAISS indexes of the search stage
LAYOUT_COLUMNS = ("src", "dst", "weight", "id", "name", "features")  # of the Parquet layout


@dataclass(frozen=True)
class EmbedConfig:
    """What the paper varies: depth, operator and the ablation switches."""

    layers: int = 3
    operator: str = "sum"
    self_loops: bool = True
    random_weights: bool = False  # W_l ~ N(0, 1/d) instead of W_l = I
    bias: float = 0.0  # beta: scale of a random bias b_l ~ N(0, beta^2/d); 0 = none
    relu: bool = False  # sigma = ReLU between layers instead of identity
    basic: bool = False  # BasicTFGM: residual, last layer only
    include_input: bool = True  # keep F^(0) in the concatenation

    def __post_init__(self) -> None:
        if not math.isfinite(self.bias) or self.bias < 0:
            raise ValueError(f"bias = {self.bias} is out of range (must be finite and >= 0)")
        if self.layers < 0:
            raise ValueError(f"layers = {self.layers} is out of range (must be >= 0)")
        if self.operator not in OPERATORS:
            raise ValueError(f"operator = {self.operator!r} is not one of {', '.join(OPERATORS)}")
        if self.basic and not self.include_input:
            raise ValueError("basic = true needs include_input = true: BasicTFGM's residual "
                             "starts at X")

    @property
    def num_blocks(self) -> int:
        """How many unit-norm blocks an embedding row concatenates (its maximal score)."""
        return 1 if self.basic else self.layers + int(self.include_input)


@dataclass(frozen=True)
class FeatureConfig:
    kind: str = "auto"  # auto: given vectors, else names, else degree-sinusoidal
    ngram: int = 2  # character n-gram size for names
    ngram_dim: int = 2048  # hashed n-gram width
    encoder: bool = False  # add all-MiniLM-L6-v2 sentence vectors of the names
    sinusoidal_dim: int = 512
    project_dim: int = 0  # seeded random projection of X to this width; 0 keeps X

    def __post_init__(self) -> None:
        _choice("kind", self.kind, FEATURE_KINDS)
        _at_least("ngram", self.ngram, 1)
        _at_least("ngram_dim", self.ngram_dim, 1)
        _at_least("sinusoidal_dim", self.sinusoidal_dim, 2)
        _at_least("project_dim", self.project_dim, 0)


@dataclass(frozen=True)
class SearchConfig:
    index: str = "flat"
    k: int = 50  # candidates kept per source for refinement, ranking and assignment
    nlist: int = 0  # IVF lists; 0 = 4 sqrt(n) for ivf, sqrt(n) for ivfpq
    nprobe: int = 16  # IVF lists probed; raised by the recall target when that is set
    recall: float = 0.99  # IVF: nprobe grows (x1.41) until this share of sampled queries finds its
    # exact best match (0 = keep nprobe)
    hnsw_m: int = 32
    ef_search: int = 128

    def __post_init__(self) -> None:
        _choice("index", self.index, INDEX_KINDS)
        _at_least("k", self.k, 1)
        if self.k > MAX_K:
            raise ValueError(f"k = {self.k} is out of range (must be <= {MAX_K}: every searched "
                             "row keeps k candidates)")
        _at_least("nlist", self.nlist, 0)
        _at_least("nprobe", self.nprobe, 1)
        if not 0 <= self.recall <= 1:
            raise ValueError(f"recall = {self.recall} is out of range (must be in [0, 1])")
        _at_least("hnsw_m", self.hnsw_m, 2)
        _at_least("ef_search", self.ef_search, 1)


@dataclass(frozen=True)
class RefineConfig:
    enabled: bool = False
    steps: int = 10
    dim: int = 256  # width of the random indicator functions r_s
    layers: int = 1  # depth of the weight-free psi_2
    include_input: bool = True  # psi_2 keeps its input block r in the concatenation

    def __post_init__(self) -> None:
        _at_least("steps", self.steps, 1)
        _at_least("dim", self.dim, 1)
        _at_least("layers", self.layers, 1)


@dataclass(frozen=True)
class AnchorConfig:
    """The anchor channel: seed indicators propagated by the weight-free layers."""

    enabled: bool = False  # with seeds only
    weight: float = 1.0  # relative to the content channel's weight of 1
    layers: int = 2
    dim: int = 256  # indicator width: exact one-hot up to dim seeds, a projection beyond

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"weight = {self.weight} is out of range (must be > 0)")
        _at_least("layers", self.layers, 1)
        _at_least("dim", self.dim, 1)


@dataclass(frozen=True)
class BootstrapConfig:
    """Confident matches made extra anchors for a few rounds (:func:`tfgm_dist.auto.prepare`)."""

    rounds: int = 0  # at most; 0: off

    def __post_init__(self) -> None:
        _at_least("rounds", self.rounds, 0)


@dataclass(frozen=True)
class AssignConfig:
    method: str = "argmax"
    one_to_one: str = "auto"  # auto: Hungarian when the dense matrix is small, else sparse
    dense_max_nodes: int = 5000  # dense Hungarian up to dense_max_nodes ** 2 cells
    min_confidence: float = 0.0  # sources whose match is less confident are not written

    def __post_init__(self) -> None:
        _choice("method", self.method, ASSIGN_METHODS)
        if not 0 <= self.min_confidence <= 1:
            raise ValueError(f"min_confidence = {self.min_confidence} is out of range "
                             "(must be in [0, 1])")
        _choice("one_to_one", self.one_to_one, ONE_TO_ONE_SOLVERS)
        _at_least("dense_max_nodes", self.dense_max_nodes, 0)


INPUT_FORMATS = ("", "edgelist", "triples", "gw", "parquet")
OUT_FORMATS = ("parquet", "delta")
JOB_PATHS = ("source", "target", "out", "seeds", "gold", "candidates", "queries", "output_root")


@dataclass(frozen=True)
class JobConfig:
    """What to align and where to put it; the command line's arguments override these."""

    source: str = ""
    target: str = ""
    out: str = ""
    format: str = ""  # "": from the extension
    columns: str = ""  # the Parquet layout's columns under other names: "src=from,dst=to,id=user"
    seeds: str = ""  # "": none (likewise gold, candidates, queries)
    gold: str = ""
    candidates: str = ""
    queries: str = ""
    overwrite: bool = False
    output_root: str = ""  # when set, out must lie inside this folder (or URI prefix)
    # "parquet": OUT is one run's folder; "delta": OUT is a Delta Lake table of dated runs
    out_format: str = "parquet"
    run_date: str = ""  # YYYY-MM-DD, the Delta partition a run replaces; "": today (UTC)

    def __post_init__(self) -> None:
        _choice("format", self.format, INPUT_FORMATS)
        _choice("out_format", self.out_format, OUT_FORMATS)
        column_names(self.columns)  # raises on a malformed mapping
        if self.run_date:
            try:
                date.fromisoformat(self.run_date)
                valid = len(self.run_date) == 10
            except ValueError:
                valid = False
            if not valid:
                raise ValueError(f"run_date {self.run_date!r} is not a date (YYYY-MM-DD)")
        if self.run_date and self.out_format != "delta":
            raise ValueError("run_date applies to out_format = \"delta\" only (a Parquet "
                             "folder holds one run)")
        if self.out_format == "delta" and self.overwrite:
            raise ValueError("overwrite does not apply to out_format = \"delta\": a run "
                             "replaces its run date's partition, and other dates stay")


@dataclass(frozen=True)
class RayConfig:
    """Where and how wide the distributed run is."""

    # P actors, each holding 1/P of what is searched: for align also 1/P of each graph to
    # embed, for align-supervised 1/P of the collection's labelled nodes; 0: see cli / jobs.align
    partitions: int = 0
    address: str = ""  # "": RAY_ADDRESS (set by ray job submit), else an in-process cluster

    def __post_init__(self) -> None:
        _at_least("partitions", self.partitions, 0)


SUPERVISED_MATCHES = ("argmax", "one-to-one")


@dataclass(frozen=True)
class SupervisedConfig:
    """The kNN label features of supervised TFGMws (``align-supervised``)."""

    k: int = 10  # collection graphs whose matched node votes its label into k_i (paper: 10)
    match: str = "argmax"  # a query node's match in each collection graph: best hit or 1:1

    def __post_init__(self) -> None:
        _at_least("k", self.k, 1)
        _choice("match", self.match, SUPERVISED_MATCHES)


@dataclass(frozen=True)
class Config:
    """Every setting of a run.

    ``auto``: the job chooses every setting the user did not set (:mod:`tfgm_dist.auto`);
    ``explicit`` lists the dotted keys the user set, in a file or on the command line, which
    the automatic choices never touch.
    """

    seed: int = 0
    top_k: int = 1  # rows written per source
    auto: bool = True
    explicit: tuple[str, ...] = ()
    features: FeatureConfig = field(default_factory=FeatureConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    anchors: AnchorConfig = field(default_factory=AnchorConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    assign: AssignConfig = field(default_factory=AssignConfig)
    job: JobConfig = field(default_factory=JobConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)

    def __post_init__(self) -> None:
        if not 0 <= self.seed < 2**63:  # torch and numpy take 64-bit seeds
            raise ValueError(f"seed = {self.seed} is out of range (must be in [0, 2^63))")
        _at_least("top_k", self.top_k, 1)
        if self.top_k > self.search.k:
            raise ValueError(f"top_k = {self.top_k} exceeds search.k = {self.search.k}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def is_set(self, key: str) -> bool:
        """Whether the user set ``key`` (dotted) or, for a section, any key in it."""
        return any(k == key or k.startswith(key + ".") for k in self.explicit)


def _choice(key: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{key} = {value!r} is not one of {', '.join(choices)}")


def _at_least(key: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"{key} = {value} is out of range (must be >= {low})")


def _build(cls: type, data: dict[str, Any], where: str, prefix: str = "") -> Any:
    if not isinstance(data, dict):
        raise InputError(f"{where}: section {prefix.rstrip('.') or '<top>'} must be a table")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if key not in names or cls is Config and key == "explicit":
            raise InputError(f"{where}: unknown key {prefix}{key} "
                             f"(known: {', '.join(sorted(names))})")
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = _build(hint, value, where, f"{prefix}{key}.")
        elif hint is bool and not isinstance(value, bool) or \
                hint is int and (isinstance(value, bool) or not isinstance(value, int)) or \
                hint is str and not isinstance(value, str) or \
                hint is float and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InputError(f"{where}: {prefix}{key} must be {hint.__name__}, "
                             f"got {value!r}")
        else:
            kwargs[key] = float(value) if hint is float else value
    try:
        return cls(**kwargs)
    except ValueError as e:  # every section validates itself; its messages start with the key
        raise InputError(f"{where}: {prefix}{e}") from None


def from_dict(data: dict[str, Any], where: str = "config") -> Config:
    """A validated :class:`Config` from nested dicts (missing keys keep their defaults).

    Every key present in ``data`` counts as set by the user, unless ``data["explicit"]``,
    as :meth:`Config.to_dict` writes it, lists them."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: the config must be a table")
    given = data.get("explicit")
    data = {k: v for k, v in data.items() if k != "explicit"}
    cfg = _build(Config, data, where)
    keys = set(given) if given is not None else set(_dotted(data))
    return replace(cfg, explicit=tuple(sorted(keys)))


def _dotted(data: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys of the leaves of nested dicts."""
    keys = []
    for key, value in data.items():
        if isinstance(value, dict):
            keys += _dotted(value, f"{prefix}{key}.")
        else:
            keys.append(prefix + key)
    return keys


def load_config(path: str | Path | None) -> Config:
    """Read a TOML (``.toml``) or YAML (``.yaml``/``.yml``) config; ``None`` gives defaults."""
    if path is None:
        return Config()
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise InputError(f"{path}: cannot read config ({e.strerror})") from None
    try:
        if path.suffix == ".toml":
            data = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            data = yaml.safe_load(text) or {}
        else:
            raise InputError(f"{path}: config must be .toml, .yaml or .yml")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise InputError(f"{path}: not valid {path.suffix[1:].upper()}: "
                         f"{str(e).splitlines()[0]}") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a config") from None
    if isinstance(data, dict) and "explicit" in data:
        raise InputError(f"{path}: unknown key explicit (it lists what the file sets)")
    cfg = from_dict(data, str(path))
    return replace(cfg, job=_relative_to(cfg.job, path.resolve().parent))


def _relative_to(job: JobConfig, folder: Path) -> JobConfig:
    """``job`` with its relative local paths taken relative to ``folder`` (the config's)."""
    paths = {}
    for name in JOB_PATHS:
        value = getattr(job, name)
        if value and "://" not in value:
            paths[name] = str(folder / value)
    return replace(job, **paths)


def column_names(text: str) -> dict[str, str]:
    """``job.columns`` (``--columns``), e.g. ``"src=from,dst=to,id=user_id"``, as the user's
    name of each Parquet-layout column (:data:`LAYOUT_COLUMNS`); a column not named keeps the
    layout's own name."""
    names = dict(zip(LAYOUT_COLUMNS, LAYOUT_COLUMNS))
    for item in filter(None, (part.strip() for part in text.split(","))):
        column, sep, name = (x.strip() for x in item.partition("="))
        if not sep or not name or column not in LAYOUT_COLUMNS:
            raise InputError(f"columns: {item!r} is not COLUMN=NAME with COLUMN one of "
                             f"{', '.join(LAYOUT_COLUMNS)}")
        names[column] = name
    return names


def setting(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set`` as ``(key, value)``: the value read as a TOML value
    (``20``, ``true``, ``0.5``, ``"a b"``), else as the string it is (``s3://bucket/out``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise InputError(f"command line: --set {text!r} is not KEY=VALUE")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return key.strip(), parsed


def with_overrides(cfg: Config, **overrides: Any) -> Config:
    """``cfg`` with dotted-key overrides: ``with_overrides(cfg, **{"refine.enabled": True})``."""
    data = cfg.to_dict()
    explicit = data.pop("explicit")
    for dotted, value in overrides.items():
        node = data
        *parents, last = dotted.split(".")
        for p in parents:
            node = node.get(p) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise InputError(f"command line: unknown setting {dotted}")
        node[last] = value
    cfg = _build(Config, data, "command line")
    return replace(cfg, explicit=tuple(sorted(set(explicit) | set(overrides))))
