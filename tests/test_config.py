"""Configuration: validation errors, save/load round trip, overrides, CLI."""

import subprocess
import sys

import pytest

from nmt.cli import main
from nmt.config import (
    ConfigError,
    ModelConfig,
    apply_overrides,
    base,
    big,
    load_model_config,
    parse_overrides,
    preset,
    save,
)


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
