"""Keys that mean nothing for the model kind or schedule chosen, and a validation too short to mean
anything, are refused at load with one line that says which keys apply where."""
import pytest

from minflux_train.__main__ import main
from minflux_train.config import ConfigError, load_config

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

APPLY = ("model.layer_norm, model.cell_form, model.init and model.mode apply to model.kind = \"hmlstm\" "
         "only (the LSTM baseline reads model.embed_size, model.hidden_sizes, model.output_embed_size "
         "and model.dtype)")


@pytest.mark.parametrize("key, shown", [("model.layer_norm=true", "model.layer_norm = true"),
                                        ("model.cell_form=branch", 'model.cell_form = "branch"'),
                                        ("model.init=independent", 'model.init = "independent"'),
                                        ("model.mode=reverse", 'model.mode = "reverse"')])
def test_hmlstm_keys_under_an_lstm_are_refused_saying_which_keys_apply_to_which_kind(key, shown):
    with pytest.raises(ConfigError) as caught:
        load_config(None, ["model.kind=lstm", key])
    message = str(caught.value)
    assert f'{shown} means nothing for model.kind = "lstm"' in message
    assert APPLY in message and "\n" not in message


def test_the_default_values_of_hmlstm_keys_are_accepted_under_an_lstm():
    assert load_config("lstm_ptb").model.kind == "lstm"
    assert load_config(None, ["model.kind=lstm", "model.layer_norm=false"]).model.layer_norm is False


def test_switching_the_default_experiment_to_an_lstm_says_what_to_reset(tmp_path, capsys):
    assert main(["--config", "default", "--out", str(tmp_path / "run"), "--set", "model.kind=lstm"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --set model.kind=lstm: model.layer_norm = true means nothing for "
                          'model.kind = "lstm"') and "(--set model.layer_norm=false)" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "run").exists()


def test_a_one_layer_hmlstm_suggests_an_lstm_that_loads(cfg, tmp_path, capsys):
    assert main(["--config", "default", "--out", str(tmp_path / "run"), "--set",
                 "model.hidden_sizes=[64]"]) == 1
    err = capsys.readouterr().err
    suggested = err.split("train the LSTM baseline with ")[1].strip()
    assert suggested == "--set model.kind=lstm --set model.layer_norm=false"
    overrides = [part for part in suggested.split("--set ") if part.strip()]
    assert load_config("default", [o.strip() for o in overrides]).model.kind == "lstm"


@pytest.mark.parametrize("overrides, least", [
    (["train.eval_chars=1"], 64 * 100),
    (["train.eval_chars=799", "train.batch_size=8", "train.seq_len=100"], 800),
    (["train.eval_chars=99", "train.eval_batch_size=2", "train.seq_len=50"], 100),
])
def test_too_few_validation_characters_are_refused_with_the_bound_and_its_reason(overrides, least):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    message = str(caught.value)
    assert "is too few to mean anything" in message and f"use at least {least} (or 0: the whole split)" in message
    assert "each must read at least one window of train.seq_len" in message


def test_enough_validation_characters_and_the_whole_split_are_accepted():
    assert load_config(None, ["train.eval_chars=6400"]).train.eval_chars == 6400
    assert load_config(None, ["train.eval_chars=0"]).train.eval_chars == 0
    assert load_config("hmlstm_text8").train.eval_chars == 500000
