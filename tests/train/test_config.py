"""TOML configs: shipped files, paper hyperparameters, errors that name key and file, overrides."""
import tomllib

import pytest

from minflux_train.config import CONFIG_DIR, Config, ConfigError, dump_toml, load_config

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

SHIPPED = sorted(CONFIG_DIR.glob("*.toml"))


def write(tmp_path, text, name="exp.toml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_shipped_configs_exist():
    assert {p.name for p in SHIPPED} >= {"default.toml", "hmlstm_ptb.toml", "hmlstm_text8.toml",
                                         "hmlstm_enwik8.toml", "lstm_ptb.toml"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_load_and_round_trip_through_toml(path, tmp_path):
    cfg = load_config(path)
    assert load_config(write(tmp_path, dump_toml(cfg))) == cfg


def test_paper_hyperparameters():
    ptb = load_config("hmlstm_ptb")
    assert (ptb.data.corpus, ptb.model.kind, ptb.model.hidden_sizes) == ("ptb", "hmlstm", [512] * 3)
    assert (ptb.train.batch_size, ptb.train.seq_len, ptb.optim.lr, ptb.optim.clip_norm) == (64, 100, 0.002, 1.0)
    assert ptb.train.slope_annealing and ptb.optim.plateau_factor == 50
    for corpus in ("text8", "enwik8"):
        cfg = load_config(f"hmlstm_{corpus}")
        assert cfg.data.corpus == corpus and cfg.model.hidden_sizes == [1024] * 3
        assert cfg.model.output_embed_size == 2048 and cfg.train.batch_size == 128
        assert (cfg.optim.lr, cfg.optim.clip_norm, cfg.train.seq_len) == (0.001, 1.0, 100)
    lstm = load_config("lstm_ptb")
    assert lstm.model.kind == "lstm" and lstm.data == ptb.data and lstm.optim == ptb.optim
    assert load_config("default").data.corpus == "default"


def test_empty_file_gives_the_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == Config()


def test_unknown_key_names_the_key_the_file_and_the_allowed_keys(tmp_path):
    path = write(tmp_path, "[optim]\nlr = 0.1\nlearning_rate = 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "'optim.learning_rate'" in message and str(path) in message
    assert "allowed keys in [optim]: lr, clip_norm, schedule, warmup_steps, plateau_factor" in message


def test_unknown_section_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key 'optimizer'; allowed keys in the top level: name, data"):
        load_config(write(tmp_path, "[optimizer]\nlr = 1\n"))


@pytest.mark.parametrize("text, pattern", [
    ('[optim]\nlr = "fast"', r"optim\.lr must be a number, got str 'fast'"),
    ("[train]\nbatch_size = 3.5", r"train\.batch_size must be an integer, got float 3\.5"),
    ("[train]\nbatch_size = true", r"train\.batch_size must be an integer, got bool True"),
    ("[model]\nhidden_sizes = 128", r"model\.hidden_sizes must be a list of integers, got int 128"),
    ('[model]\nhidden_sizes = [128, "a"]', r"model\.hidden_sizes\[1\] must be an integer"),
    ("[train]\nslope_annealing = 1", r"train\.slope_annealing must be true or false"),
    ('[train]\ndevice = "tpu"', r"train\.device must be one of 'cpu', 'gpu', 'auto', got 'tpu'"),
    ("data = 3", r"data must be a table"),
])
def test_wrong_types_name_the_key_and_file(tmp_path, text, pattern):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=pattern) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_integers_widen_to_floats(tmp_path):
    cfg = load_config(write(tmp_path, "[optim]\nlr = 1\n"))
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)


def test_missing_file_names_it_and_lists_shipped_configs(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found: nope\.toml.*shipped configs: default\.toml"):
        load_config("nope.toml")


def test_invalid_toml_names_the_file(tmp_path):
    path = write(tmp_path, "[optim\nlr = 1")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        load_config(path)


def test_overrides():
    cfg = load_config("default", ["optim.lr=0.001", "model.hidden_sizes=[32, 32]", "data.corpus=ptb",
                                  "train.device=\"cpu\"", "name=run7", "sample.prime=The cat"])
    assert cfg.optim.lr == 0.001 and cfg.model.hidden_sizes == [32, 32] and cfg.data.corpus == "ptb"
    assert cfg.train.device == "cpu" and cfg.name == "run7" and cfg.sample.prime == "The cat"
    assert cfg.train.batch_size == load_config("default").train.batch_size  # the rest is the file's


@pytest.mark.parametrize("override, pattern", [
    ("optim.lrr=1", r"--set optim\.lrr=1: unknown key 'optim\.lrr'; allowed keys in \[optim\]: lr"),
    ("optim.lr=abc", r"--set optim\.lr=abc: optim\.lr must be a number, got str 'abc'"),
    ("optim.lr", r"write KEY=VALUE"),
    ("train.batch_size=0.5", r"train\.batch_size must be an integer"),
])
def test_bad_overrides_are_errors(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        load_config("default", [override])


def test_dump_is_valid_toml_with_every_section():
    data = tomllib.loads(dump_toml(load_config("hmlstm_ptb")))
    assert set(data) == {"name", "data", "model", "optim", "train", "sample"}


@pytest.mark.parametrize("override, message", [
    ("optim.lr=0", "optim.lr must be > 0.0, got 0.0"),
    ("optim.lr=-0.1", "optim.lr must be > 0.0, got -0.1"),
    ("optim.clip_norm=-1", r"optim.clip_norm must be >= 0.0 \(0: no clipping\), got -1.0"),
    ("optim.plateau_factor=1", r"optim.plateau_factor must be > 1.0 \(the learning rate is divided by it\)"),
    ("optim.plateau_factor=0.5", "optim.plateau_factor must be > 1.0"),
    ("train.checkpoint_every=0", "train.checkpoint_every must be >= 1, got 0"),
    ("train.log_every=0", "train.log_every must be >= 1, got 0"),
    ("train.eval_every=-5", r"train.eval_every must be >= 0 \(0: once per epoch\), got -5"),
    ("train.epochs=0", "train.epochs must be >= 1, got 0"),
    ("train.max_steps=-1", r"train.max_steps must be >= 0 \(0: no limit other than epochs\)"),
    ("train.batch_size=0", "train.batch_size must be >= 1"),
    ("model.hidden_sizes=[32, 0]", r"model.hidden_sizes\[1\] must be >= 1, got 0"),
    ("model.hidden_sizes=[]", "model.hidden_sizes must not be empty"),
    ("model.embed_size=0", "model.embed_size must be >= 1"),
    ("sample.temperature=-0.5", "sample.temperature must be >= 0.0"),
    ("sample.length=-1", "sample.length must be >= 0, got -1"),
])
def test_nonsense_values_are_refused_at_load_with_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_nonsense_values_in_a_file_name_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[train]\nlog_every = 0\n")
    with pytest.raises(ConfigError, match=f"{path}: train.log_every must be >= 1"):
        load_config(path)


@pytest.mark.parametrize("content", [b"\xff\xfe[\x00t\x00", b"\x89PNG\r\n\x1a\n\x00\x00"])
def test_a_binary_config_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "binary.toml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
