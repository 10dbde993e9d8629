"""The run configuration: TOML/YAML parsing, validation messages, overrides, no code execution."""
import dataclasses

import pytest

from tfgm_dist.config import Config, from_dict, load_config, with_overrides
from tfgm_dist.config import EmbedConfig
from tfgm_dist.errors import InputError

TOML = """\
seed = 7
top_k = 3

[features]
kind = "names"
ngram = 3

[embed]
layers = 2
operator = "gcn"
bias = 0.5
self_loops = false

[search]
index = "hnsw"
k = 20

[refine]
enabled = true
steps = 4

[assign]
method = "one-to-one"
one_to_one = "sparse"
"""

YAML = """\
seed: 7
top_k: 3
features:
  kind: names
  ngram: 3
embed:
  layers: 2
  operator: gcn
  bias: 0.5
  self_loops: false
search:
  index: hnsw
  k: 20
refine:
  enabled: true
  steps: 4
assign:
  method: one-to-one
  one_to_one: sparse
"""


def test_defaults_load():
    cfg = load_config(None)
    assert cfg == Config() == from_dict({})
    assert cfg.embed == EmbedConfig()
    assert (cfg.seed, cfg.top_k, cfg.search.k, cfg.search.index) == (0, 1, 50, "flat")
    assert cfg.refine.enabled is False and cfg.assign.method == "argmax"


def test_empty_files_give_defaults(tmp_path):
    (tmp_path / "a.toml").write_text("")
    (tmp_path / "b.yaml").write_text("")
    assert load_config(tmp_path / "a.toml") == Config() == load_config(tmp_path / "b.yaml")


def test_toml_and_yaml_parse_to_the_same_config(tmp_path):
    (tmp_path / "c.toml").write_text(TOML)
    (tmp_path / "c.yaml").write_text(YAML)
    (tmp_path / "c.yml").write_text(YAML)
    a, b, c = (load_config(tmp_path / f) for f in ("c.toml", "c.yaml", "c.yml"))
    assert a == b == c
    assert a != Config()
    assert (a.seed, a.top_k, a.features.kind, a.features.ngram) == (7, 3, "names", 3)
    assert a.embed == EmbedConfig(layers=2, operator="gcn", bias=0.5, self_loops=False)
    assert (a.search.index, a.search.k, a.refine.enabled, a.refine.steps) == ("hnsw", 20, True, 4)
    assert (a.assign.method, a.assign.one_to_one) == ("one-to-one", "sparse")


def test_only_the_job_paths_are_taken_relative_to_the_config_file(tmp_path):
    (tmp_path / "c.toml").write_text(
        '[job]\nsource = "g/a.tsv"\nout = "s3://bucket/out"\ncolumns = "src=from"\n'
        'format = "edgelist"\nout_format = "delta"\nrun_date = "2026-11-23"\n')
    job = load_config(tmp_path / "c.toml").job
    assert job.source == str(tmp_path / "g" / "a.tsv") and job.out == "s3://bucket/out"
    assert (job.columns, job.format, job.out_format, job.run_date) == (
        "src=from", "edgelist", "delta", "2026-11-23")


def test_int_is_accepted_for_a_float_field(tmp_path):
    (tmp_path / "c.yaml").write_text("embed:\n  bias: 1\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.embed.bias == 1.0 and isinstance(cfg.embed.bias, float)


BAD = [
    # (toml text, dotted key the message must name, more of the message)
    ("foo = 1\n", "foo", "unknown key"),
    ("[search]\nkk = 10\n", "search.kk", "unknown key"),
    ("[search]\nk = \"10\"\n", "search.k", "must be int"),
    ("[search]\nk = true\n", "search.k", "must be int"),
    ("[search]\nk = 10.0\n", "search.k", "must be int"),
    ("seed = \"0\"\n", "seed", "must be int"),
    ("[refine]\nenabled = 1\n", "refine.enabled", "must be bool"),
    ("[embed]\nbias = \"big\"\n", "embed.bias", "must be float"),
    ("[embed]\nbias = true\n", "embed.bias", "must be float"),
    ("[features]\nkind = 3\n", "features.kind", "is not one of"),
    ("[search]\nk = 0\n", "search.k", "out of range"),
    ("[refine]\nsteps = -2\n", "refine.steps", "out of range"),
    ("top_k = 0\n", "top_k", "out of range"),
    ("[assign]\nmethod = \"greedy\"\n", "assign.method", "is not one of"),
    ("[search]\nindex = \"lsh\"\n", "search.index", "is not one of"),
    ("[features]\nkind = \"pixels\"\n", "features.kind", "is not one of"),
    ("embed = 3\n", "embed", "must be a table"),
]


@pytest.mark.parametrize("text,key,what", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_toml_value_raises_input_error_naming_file_and_key(tmp_path, text, key, what):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert key in message and what in message
    assert "\n" not in message


@pytest.mark.parametrize("text,key", [("search:\n  k: '10'\n", "search.k"),
                                      ("search:\n  kk: 1\n", "search.kk"),
                                      ("assign:\n  method: greedy\n", "assign.method"),
                                      ("top_k: yes\n", "top_k")])
def test_bad_yaml_value_raises_input_error_naming_file_and_key(tmp_path, text, key):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=key) as info:
        load_config(path)
    assert str(info.value).startswith(str(path))


@pytest.mark.parametrize("text,key", [("[embed]\nlayers = -1\n", "embed.layers"),
                                      ("[embed]\noperator = \"max\"\n", "embed.operator"),
                                      ("[embed]\nbias = -1.0\n", "embed.bias")])
def test_bad_embed_value_names_its_dotted_key(tmp_path, text, key):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path)) and key in str(info.value)


@pytest.mark.parametrize("text", ["[embed]\nlayers = -1\n", "[embed]\noperator = \"max\"\n",
                                  "[embed]\nbasic = true\ninclude_input = false\n"])
def test_bad_embed_value_is_an_input_error_naming_the_file(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path))


def test_top_k_above_search_k_is_refused(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("top_k = 60\n")
    with pytest.raises(InputError, match=r"top_k = 60 exceeds search\.k = 50"):
        load_config(path)


def test_invalid_syntax_is_an_input_error_naming_the_file(tmp_path):
    (tmp_path / "a.toml").write_text("[search\nk = 1\n")
    (tmp_path / "b.yaml").write_text("search: [1, 2\n")
    with pytest.raises(InputError, match=r"a\.toml: not valid TOML"):
        load_config(tmp_path / "a.toml")
    with pytest.raises(InputError, match=r"b\.yaml: not valid YAML"):
        load_config(tmp_path / "b.yaml")


@pytest.mark.parametrize("name", ["run.py", "run.json", "run.cfg", "run"])
def test_other_extensions_are_refused(tmp_path, name):
    path = tmp_path / name
    path.write_text("seed = 1\n")
    with pytest.raises(InputError, match="must be .toml, .yaml or .yml"):
        load_config(path)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="cannot read config"):
        load_config(tmp_path / "absent.toml")


def test_yaml_python_tag_is_refused_and_not_executed(tmp_path):
    marker = tmp_path / "executed"
    path = tmp_path / "evil.yaml"
    path.write_text(f'seed: !!python/object/apply:os.system ["touch {marker}"]\n'
                    "refine: !!python/object:types.SimpleNamespace {}\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_config(path)
    assert not marker.exists()


def test_with_overrides_sets_dotted_keys_and_leaves_the_original():
    base = Config()
    cfg = with_overrides(base, **{"refine.enabled": True, "search.k": 20, "top_k": 5,
                                  "embed.operator": "mean", "seed": 3})
    assert cfg.refine.enabled is True and cfg.search.k == 20 and cfg.top_k == 5
    assert cfg.embed.operator == "mean" and cfg.seed == 3
    assert cfg.search.index == base.search.index  # untouched keys keep their values
    assert base == Config()
    assert dataclasses.replace(cfg) == from_dict(cfg.to_dict())  # round trip


@pytest.mark.parametrize("override,key", [({"search.k": 0}, "search.k"),
                                          ({"search.nope": 1}, "search.nope"),
                                          ({"assign.method": "greedy"}, "assign.method"),
                                          ({"top_k": "2"}, "top_k")])
def test_with_overrides_validates_like_a_file(override, key):
    with pytest.raises(InputError, match=key) as info:
        with_overrides(Config(), **override)
    assert str(info.value).startswith("command line")


def test_with_overrides_unknown_section_is_an_input_error():
    with pytest.raises(InputError, match="nope"):
        with_overrides(Config(), **{"nope.x": 1})


def test_settings_built_in_code_are_validated_like_a_file():
    # the sections are pydantic dataclasses: replace() and direct construction check too
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        dataclasses.replace(Config().search, k=0)
    with pytest.raises(ValueError, match="valid integer"):
        EmbedConfig(layers=2.5)
    with pytest.raises(ValueError, match="needs include_input = true"):
        EmbedConfig(basic=True, include_input=False)
    assert dataclasses.replace(Config().anchors, weight=4).weight == 4.0  # an int is a float


@pytest.mark.parametrize("data,message", [
    ({"seed": 2**64}, "seed = 18446744073709551616 is out of range (input should be less than"),
    ({"search": {"k": 5000}}, "search.k = 5000 is out of range (input should be less than or "
                              "equal to 4096)"),
    ({"anchors": {"weight": float("inf")}}, "anchors.weight must be a finite float, got inf"),
    ({"assign": {"min_confidence": 1.5}}, "assign.min_confidence = 1.5 is out of range"),
    ({"job": {"run_date": "2026-13-01", "out_format": "delta"}},
     "job.run_date '2026-13-01' is not a date (YYYY-MM-DD)"),
])
def test_the_first_error_is_one_line_naming_the_dotted_key(data, message):
    with pytest.raises(InputError) as info:
        from_dict(data, "run.toml")
    assert str(info.value).startswith("run.toml: " + message)
    assert "\n" not in str(info.value)
