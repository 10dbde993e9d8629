"""The run configuration: every knob of every stage, from a TOML or YAML file or the CLI.

Files are parsed (``tomllib``, ``yaml.safe_load``), never executed. Each section is a frozen
pydantic dataclass whose types and ranges are declared with its keys, so a setting built in
code (``dataclasses.replace``) is checked like one read from a file. Unknown keys, wrong
types and out-of-range values are rejected with a one-line error naming the file and key.
"""
from __future__ import annotations

import dataclasses
import functools
import tomllib
from dataclasses import field, replace
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_type_hints

import yaml
from pydantic import ConfigDict, Field, Strict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass

from .errors import InputError

# Scalars are strict: a TOML string "10" or a YAML `yes` is not taken for a number or a bool
# (an int still counts as a float); ranges are checked where the type is declared.
Int = Annotated[int, Strict()]
Count = Annotated[int, Strict(), Field(ge=0)]
Positive = Annotated[int, Strict(), Field(ge=1)]
Float = Annotated[float, Strict(), Field(allow_inf_nan=False)]
Share = Annotated[float, Strict(), Field(ge=0, le=1)]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]

FeatureKind = Literal["auto", "given", "names", "degree-onehot", "degree-sinusoidal"]
AssignMethod = Literal["argmax", "mutual", "one-to-one"]
OneToOneSolver = Literal["auto", "hungarian", "sparse", "sinkhorn"]
Partitioner = Literal["auto", "metis", "rcm", "streaming"]
Operator = Literal["sum", "mean", "gcn"]  # the weight-free layers' graph operators
IndexKind = Literal["flat", "ivf", "ivfpq", "hnsw"]  # the FAISS indexes of the search stage
InputFormat = Literal["", "edgelist", "triples", "gw", "parquet"]
OutFormat = Literal["parquet", "delta"]
SupervisedMatch = Literal["argmax", "one-to-one"]
Device = Literal["auto", "cpu", "cuda"]  # where one process embeds, searches and refines
ASSIGN_METHODS = get_args(AssignMethod)
OPERATORS = get_args(Operator)
INDEX_KINDS = get_args(IndexKind)
OUT_FORMATS = get_args(OutFormat)
MAX_K = 4096  # candidates per row; GPU FAISS's own limit is 2048
# the columns of the Parquet layout
LAYOUT_COLUMNS = ("src", "dst", "weight", "relation", "id", "name", "features")
JOB_PATHS = ("source", "target", "out", "seeds", "gold", "candidates", "queries", "output_root")

# Every section: frozen, unknown keys refused. Cross-key rules live in ``__post_init__`` and
# raise ValueError with a message that starts with the key.
SECTION = ConfigDict(extra="forbid")


@dataclass(frozen=True, config=SECTION)
class EmbedConfig:
    """What the paper varies: depth, operator and the ablation switches."""

    layers: Count = 3
    operator: Operator = "sum"
    self_loops: Bool = True
    random_weights: Bool = False  # W_l ~ N(0, 1/d) instead of W_l = I
    bias: Annotated[Float, Field(ge=0)] = 0.0  # beta: a random bias b_l ~ N(0, beta^2/d); 0 = none
    relu: Bool = False  # sigma = ReLU between layers instead of identity
    basic: Bool = False  # BasicTFGM: residual, last layer only
    include_input: Bool = True  # keep F^(0) in the concatenation
    # F^(0)'s weight in a score, relative to one layer's block (its rows scaled by the root)
    input_weight: Annotated[Float, Field(gt=0)] = 1.0
    # a knowledge graph's relation roles join the operator as nodes (pipeline.operators)
    relations: Bool = True

    def __post_init__(self) -> None:
        if self.basic and not self.include_input:
            raise ValueError("basic = true needs include_input = true: BasicTFGM's residual "
                             "starts at X")

    @property
    def num_blocks(self) -> int:
        """How many unit-norm blocks an embedding row concatenates."""
        return len(self.block_weights)

    @property
    def block_weights(self) -> list[float]:
        """Each block's weight in a score, in the order of the concatenation: the input's
        (``input_weight``) first where kept, then 1 per layer."""
        if self.basic:
            return [1.0]
        return [self.input_weight] * int(self.include_input) + [1.0] * self.layers

    @property
    def unit_blocks(self) -> float:
        """The largest score of two embedding rows: the sum of :attr:`block_weights`."""
        return sum(self.block_weights)


@dataclass(frozen=True, config=SECTION)
class FeatureConfig:
    kind: FeatureKind = "auto"  # auto: given vectors, else names, else degree-sinusoidal
    ngram: Positive = 2  # character n-gram size for names
    ngram_dim: Positive = 2048  # hashed n-gram width
    encoder: Bool = False  # add all-MiniLM-L6-v2 sentence vectors of the names (auto: by size)
    sinusoidal_dim: Annotated[Int, Field(ge=2)] = 512
    project_dim: Count = 0  # seeded random projection of X to this width; 0 keeps X
    # given vectors whose every value in both graphs is a non-negative integer (counts) are
    # square-rooted before use (pipeline.Content.counts)
    root_counts: Bool = True


@dataclass(frozen=True, config=SECTION)
class SearchConfig:
    index: IndexKind = "flat"
    # candidates kept per source for refinement, ranking and assignment; every searched row
    # keeps k of them
    k: Annotated[Positive, Field(le=MAX_K)] = 50
    nlist: Count = 0  # IVF lists; 0 = 4 sqrt(n) for ivf, sqrt(n) for ivfpq
    nprobe: Positive = 16  # IVF lists probed; raised by the recall target when that is set
    recall: Share = 0.99  # IVF: nprobe grows (x1.41) until this share of sampled queries finds
    # its exact best match (0 = keep nprobe)
    hnsw_m: Annotated[Int, Field(ge=2)] = 32
    ef_search: Positive = 128


@dataclass(frozen=True, config=SECTION)
class RefineConfig:
    enabled: Bool = False
    steps: Positive = 10
    dim: Positive = 256  # width of the random indicator functions r_s
    layers: Positive = 1  # depth of the weight-free psi_2
    include_input: Bool = True  # psi_2 keeps its input block r in the concatenation


@dataclass(frozen=True, config=SECTION)
class AnchorConfig:
    """The anchor channel: seed indicators propagated by the weight-free layers."""

    enabled: Bool = False  # with seeds only
    weight: Annotated[Float, Field(gt=0)] = 1.0  # relative to the content channel's 1
    layers: Positive = 2
    # indicator width: exact one-hot up to dim seeds, a projection beyond. 128, not 256: the
    # same accuracy within noise (DBP15k with seeds 95.9 / 98.3 / 99.1 one-to-one against
    # 96.0 / 98.2 / 99.2; 11 featureless and 12 attributed dev pairs -1.1 to +3.1) for 10-25 %
    # less time (DBP15k zh-en 28 -> 23 s); 64 lost 0.4-0.6 points on a DBP15k structure copy
    dim: Positive = 128
    # > 0: the indicators first spread by a random walk that restarts with this probability
    # (features.walked), before the layers; 0: as they are. With no config, seeded pairs
    # without names or vectors get auto.WALK_RESTART.
    restart: Annotated[Float, Field(ge=0, lt=1)] = 0.0


@dataclass(frozen=True, config=SECTION)
class StructureConfig:
    """The structure channel: the content features, projected to ``dim``, also propagated
    through the featureless setting's deep layers (no input block, a random bias), so that
    nodes whose features look alike are still told apart by their neighbourhoods."""

    enabled: Bool = False
    weight: Annotated[Float, Field(gt=0)] = 0.5  # relative to the content channel's 1
    layers: Positive = 10
    bias: Annotated[Float, Field(ge=0)] = 2.0
    dim: Positive = 128


@dataclass(frozen=True, config=SECTION)
class BootstrapConfig:
    """Confident matches made extra anchors for a few rounds (:func:`tfgm_dist.auto.prepare`)."""

    rounds: Count = 0  # at most; 0: off
    # without seeds: 0, a round's hints are every confident mutual match; N, where the first
    # pass is unsure, the first round's are the N mutual matches of the largest margin,
    # doubled each round until they are every mutual match (grown hints)
    grow_from: Count = 0


@dataclass(frozen=True, config=SECTION)
class AssignConfig:
    method: AssignMethod = "argmax"
    one_to_one: OneToOneSolver = "auto"  # auto: Hungarian when the dense matrix is small
    dense_max_nodes: Count = 5000  # dense Hungarian up to dense_max_nodes ** 2 cells
    min_confidence: Share = 0.0  # sources whose match is less confident are not written
    # the one-to-one matching moved to keep more edges (assign.polish: FAQ, pair swaps):
    # featureless graphs; a run with another method refuses it
    polish: Bool = False
    # one-to-one of refined lists maximises the probabilities + score_weight x u / B
    # (refine.decoding). DBP15k with seeds, weights 1 / 4 / 10: zh 96.6 / 96.8 / 96.7, ja
    # 99.0 / 99.1 / - (10: the held-out seeds then chose each source's best), fr 99.4 / 99.5 /
    # 99.5
    score_weight: Annotated[Float, Field(ge=0)] = 4.0


@dataclass(frozen=True, config=SECTION)
class JobConfig:
    """What to align and where to put it; the command line's arguments override these."""

    source: Str = ""
    target: Str = ""
    out: Str = ""
    format: InputFormat = ""  # "": from the extension
    columns: Str = ""  # the Parquet layout's columns under other names: "src=from,dst=to,id=user"
    seeds: Str = ""  # "": none (likewise gold, candidates, queries)
    gold: Str = ""
    candidates: Str = ""
    queries: Str = ""
    overwrite: Bool = False
    output_root: Str = ""  # when set, out must lie inside this folder (or URI prefix)
    # "parquet": OUT is one run's folder; "delta": OUT is a Delta Lake table of dated runs
    out_format: OutFormat = "parquet"
    run_date: Str = ""  # YYYY-MM-DD, the Delta partition a run replaces; "": today (UTC)

    def __post_init__(self) -> None:
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


@dataclass(frozen=True, config=SECTION)
class RayConfig:
    """Where and how wide the distributed run is."""

    # P actors, each holding 1/P of what is searched: for align also 1/P of each graph to
    # embed, for align-supervised 1/P of the collection's labelled nodes; 0: see cli / jobs.align
    partitions: Count = 0
    address: Str = ""  # "": RAY_ADDRESS (set by ray job submit), else an in-process cluster
    # how the graphs are split (tfgm_dist.partition); auto: streaming over the edges' blocks,
    # no process holding a whole graph (metis cuts fewer edges but holds them all)
    partitioner: Partitioner = "auto"


@dataclass(frozen=True, config=SECTION)
class SupervisedConfig:
    """The kNN label features of supervised TFGMws (``align-supervised``)."""

    k: Positive = 10  # collection graphs whose matched node votes its label into k_i (paper: 10)
    match: SupervisedMatch = "argmax"  # a query node's match in each collection graph


@dataclass(frozen=True, config=SECTION)
class Config:
    """Every setting of a run.

    ``auto``: the job chooses every setting the user did not set (:mod:`tfgm_dist.auto`);
    ``explicit`` lists the dotted keys the user set, in a file or on the command line, which
    the automatic choices never touch.
    """

    seed: Annotated[Count, Field(lt=2**63)] = 0  # torch and numpy take 64-bit seeds
    top_k: Positive = 1  # rows written per source
    device: Device = "auto"  # auto: a CUDA GPU where torch sees one (Ray parts: the cluster's)
    auto: Bool = True
    explicit: tuple[str, ...] = ()
    features: FeatureConfig = field(default_factory=FeatureConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    anchors: AnchorConfig = field(default_factory=AnchorConfig)
    structure: StructureConfig = field(default_factory=StructureConfig)
    bootstrap: BootstrapConfig = field(default_factory=BootstrapConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    refine: RefineConfig = field(default_factory=RefineConfig)
    assign: AssignConfig = field(default_factory=AssignConfig)
    job: JobConfig = field(default_factory=JobConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    supervised: SupervisedConfig = field(default_factory=SupervisedConfig)

    def __post_init__(self) -> None:
        if self.top_k > self.search.k:
            raise ValueError(f"top_k = {self.top_k} exceeds search.k = {self.search.k}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def is_set(self, key: str) -> bool:
        """Whether the user set ``key`` (dotted) or, for a section, any key in it."""
        return any(k == key or k.startswith(key + ".") for k in self.explicit)


@functools.cache
def _validator() -> TypeAdapter:
    return TypeAdapter(Config)


# pydantic's error types, in the words of the one-line message
_TYPES = {"int_type": "int", "bool_type": "bool", "float_type": "float", "string_type": "str",
          "dataclass_type": "a table", "finite_number": "a finite float"}


def _build(data: dict[str, Any], where: str) -> Config:
    """``data`` (nested dicts) validated into a :class:`Config`; the first error as one line
    naming ``where`` and the dotted key."""
    try:
        return _validator().validate_python(data)
    except ValidationError as e:
        raise InputError(f"{where}: {_describe(e.errors()[0])}") from None


def _describe(error: dict[str, Any]) -> str:
    """One pydantic error as ``key …``: the dotted key first, then what is wrong with it."""
    loc = [str(part) for part in error["loc"]]
    key, kind, value = ".".join(loc), error["type"], error["input"]
    if kind == "unexpected_keyword_argument":
        section = _section(loc[:-1])
        known = ", ".join(f.name for f in dataclasses.fields(section) if f.name != "explicit")
        return f"unknown key {key} (known: {known})"
    if kind in _TYPES:
        return (f"section {key} must be a table" if kind == "dataclass_type" else
                f"{key} must be {_TYPES[kind]}, got {value!r}")
    if kind == "literal_error":
        choices = get_args(get_type_hints(_section(loc[:-1]))[loc[-1]])
        return f"{key} = {value!r} is not one of {', '.join(choices)}"
    if kind == "value_error":  # a cross-key rule of the section: its message names the key
        message = str(error["ctx"]["error"])
        return ".".join(loc + [message]) if loc else message
    return f"{key} = {value!r} is out of range ({error['msg'][0].lower()}{error['msg'][1:]})"


def _section(loc: list[str]) -> type:
    """The dataclass of the section at ``loc`` (``[]``: :class:`Config`)."""
    cls: type = Config
    for name in loc:
        cls = get_type_hints(cls)[name]
    return cls


def from_dict(data: dict[str, Any], where: str = "config") -> Config:
    """A validated :class:`Config` from nested dicts (missing keys keep their defaults).

    Every key present in ``data`` counts as set by the user, unless ``data["explicit"]``,
    as :meth:`Config.to_dict` writes it, lists them."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: the config must be a table")
    given = data.get("explicit")
    data = {k: v for k, v in data.items() if k != "explicit"}
    cfg = _build(data, where)
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
    cfg = _build(data, "command line")
    return replace(cfg, explicit=tuple(sorted(set(explicit) | set(overrides))))
