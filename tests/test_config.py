"""Configuration: validation errors, save/load round trip, overrides, CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest
from train_fixtures import tiny_args

from nmt.cli import main
from nmt.config import (
    ConfigError,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    base,
    big,
    parse_overrides,
    preset,
    train_preset,
)
from nmt.config_file import load_model_config, save

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def test_presets_match_the_paper():
    b = base()
    assert (b.n_layers, b.d_model, b.d_ff, b.n_heads, b.d_k, b.d_v, b.dropout) == (
        6,
        512,
        2048,
        8,
        64,
        64,
        0.1,
    )
    assert (b.positional, b.norm_position, b.activation, b.share_embeddings) == (
        "sinusoidal",
        "post",
        "relu",
        True,
    )
    g = big()
    assert (g.d_model, g.d_ff, g.n_heads, g.dropout) == (1024, 4096, 16, 0.3)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("n_heads", 0, "model.n_heads=0: must be a positive integer"),
        ("dropout", 1.5, "model.dropout=1.5: must be in [0, 1)"),
        ("positional", "rotary", "model.positional='rotary': must be 'sinusoidal' or 'learned'"),
        ("norm_position", "sandwich", "model.norm_position='sandwich': must be 'post' (the paper) or 'pre'"),
        ("activation", "swish", "model.activation='swish': must be 'relu' (the paper) or 'gelu'"),
        ("tgt_vocab_size", 999, "a shared embedding needs src_vocab_size == tgt_vocab_size"),
    ],
)
def test_invalid_values(field, value, message):
    cfg = base()
    setattr(cfg, field, value)
    with pytest.raises(ConfigError) as e:
        cfg.validate()
    assert message in str(e.value)


def test_odd_d_model_with_sinusoidal():
    with pytest.raises(ConfigError, match="even d_model"):
        ModelConfig(d_model=511, n_heads=7).validate()


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_round_trip(tmp_path, suffix):
    cfg = ModelConfig(d_ff=1024, positional="learned", norm_position="pre", dropout=0.2)
    path = tmp_path / f"cfg{suffix}"
    save(path, {"model": cfg})
    assert load_model_config(path) == cfg


def test_unknown_field_in_file(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  d_fff: 3\n")
    with pytest.raises(ConfigError, match="model.d_fff: unknown field"):
        load_model_config(path)


def test_overrides_are_type_checked():
    ov = parse_overrides(
        [
            "--model.d_ff=1024",
            "--model.positional",
            "learned",
            "--model.share_embeddings=false",
            "--model.dropout=0.3",
        ]
    )
    cfg = apply_overrides(base(), ov["model"], section="model")
    assert (cfg.d_ff, cfg.positional, cfg.share_embeddings, cfg.dropout) == (1024, "learned", False, 0.3)
    with pytest.raises(ConfigError, match="model.d_ff='big': expected an integer"):
        apply_overrides(base(), {"d_ff": "big"}, section="model")
    with pytest.raises(ConfigError, match="model.n_head: unknown field"):
        apply_overrides(base(), {"n_head": "4"}, section="model")
    with pytest.raises(ConfigError, match="must be one of"):
        apply_overrides(base(), {"positional": "rope"}, section="model")
    with pytest.raises(ConfigError, match="unrecognised argument"):
        parse_overrides(["--oops"])


def test_unknown_preset():
    with pytest.raises(ConfigError, match="unknown preset"):
        preset("huge")


def test_model_info_cli(capsys):
    assert main(["model-info", "--preset", "base"]) == 0
    out = capsys.readouterr().out
    assert "63,082,496" in out and "d_model" in out
    assert main(["model-info", "--preset", "base", "--model.n_heads=0"]) == 2
    assert "model.n_heads=0" in capsys.readouterr().err


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "nmt", "--help"], capture_output=True, text=True, check=True)
    assert "model-info" in out.stdout


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("empty.yaml", "model:\ntrain:\n  max_steps: 1\n", None),  # an empty section is no change
        ("list.yaml", "train: [1, 2]\n", "line 1: train: expected a mapping of fields"),
        ("number.yaml", "preset: tiny\nmodel: 5\n", "line 2: model: expected a mapping of fields"),
        ("key.yaml", "train:\n  1: 2\n  x: 3\n", "line 1: train: field name 1 is not a name"),
        ("preset.yaml", "preset: [tiny]\n", "line 1: preset=['tiny']: unknown preset"),
        ("huge.yaml", "# comment\npreset: huge\n", "line 2: preset='huge': unknown preset"),
        (
            "value.yaml",
            "preset: tiny\ntrain:\n  warmup_steps: 10\n  max_tokens: many\n",
            "line 4: train.max_tokens=",
        ),
        ("range.yaml", "model:\n  dropout: 2\n", "line 2: model.dropout=2.0: must be in [0, 1)"),
        ("nan.yaml", "train: {max_time: .nan}\n", "line 1: train.max_time=nan: must be >= 0"),
        ("unknown.yaml", "train:\n  max_step: 5\n", "line 2: train.max_step: unknown field"),
        ("value.json", '{"train": {"valid_bleu": "maybe"}}', "train.valid_bleu='maybe': expected a boolean"),
        (
            "twice.yaml",
            "train:\n  max_steps: 5\n  max_steps: 6\n",
            "line 3: not valid YAML ('max_steps' given twice",
        ),
        (
            "twice.json",
            '{"train": {"max_steps": 5, "max_steps": 6}}',
            "not valid JSON: 'max_steps' given twice",
        ),
    ],
)
def test_config_file_errors_name_the_file_and_line(tiny_data, tmp_path, capsys, name, text, message):
    """A --config file whose sections or values are wrong is one line naming the file (and, in YAML,
    the line), never an internal error (an empty section, a list, a number key, a preset list were
    TypeErrors) nor a message without the file."""
    path = tmp_path / name
    path.write_text(text)
    argv = ["train", str(tiny_data), "--out", str(tmp_path / "run"), "--config", str(path)]
    if message is None:
        from nmt.train.command import build_configs

        _, train_cfg, _ = build_configs(tiny_data, preset_name="tiny", config_file=str(path), overrides={})
        assert train_cfg.max_steps == 1
        return
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nmt train: error: {path}: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "run").exists()


def test_config_file_value_may_need_a_command_line_override(tiny_data, tmp_path):
    """The file's values and --train.* are checked together: `max_steps: 0` (no step limit) in the file
    with --train.max_time=5 on the command line is a valid run, not 'set at least one of max_steps,
    max_epochs, max_time' before the command line was read."""
    from nmt.train.command import build_configs

    path = tmp_path / "c.yaml"
    path.write_text("preset: tiny\ntrain:\n  max_steps: 0\n")
    _, train_cfg, _ = build_configs(
        tiny_data, preset_name=None, config_file=str(path), overrides={"train": {"max_time": "5"}}
    )
    assert (train_cfg.max_steps, train_cfg.max_time) == (0, 5.0)


@pytest.mark.parametrize(
    "section,field",
    [
        ("train", "lr_scale"),
        ("train", "adam_eps"),
        ("train", "collective_timeout"),
        ("model", "layer_norm_eps"),
    ],
)
def test_infinite_values_are_refused(section, field):
    """inf passed the 'must be positive' checks: --train.lr_scale=inf trained NaN weights (and a NaN
    `best`) without a word; --train.collective_timeout=inf fails only when a job starts."""
    from nmt.config import TrainConfig, tiny

    cfg = tiny(100) if section == "model" else TrainConfig()
    for value in ("inf", "nan", "0", "-1"):
        with pytest.raises(ConfigError, match=rf"{section}\.{field}=.*: must be positive and finite"):
            apply_overrides(cfg, {field: value}, section=section)
    assert apply_overrides(cfg, {field: "0.5"}, section=section).validate()


# ----------------------------------------------------------------------------- the big preset
def test_big_has_its_own_training_preset():
    """Section 5.2: base 100k steps, big 300k steps (3.5 days on 8 P100)."""
    assert train_preset("base").max_steps == 100_000
    big = train_preset("big")
    assert big.max_steps == 300_000
    assert {k: v for k, v in vars(big).items() if k != "max_steps"} == {
        k: v for k, v in vars(TrainConfig()).items() if k != "max_steps"
    }


# ----------------------------------------------------------------------------- options that would be ignored
def test_misspelled_yaml_section_is_an_error(tiny_data, tmp_path, capsys):
    for section in ("modle", "trian"):
        path = tmp_path / f"{section}.yaml"
        path.write_text(f"{section}:\n  max_steps: 1\n")
        assert train(tiny_data, tmp_path / "r", "--config", str(path), "--train.max_steps=1") == 2
        assert f"{path}: unknown section '{section}'" in capsys.readouterr().err
        assert main(["model-info", "--config", str(path)]) == 2
        assert f"unknown section '{section}'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
