"""`nmt variations`: Table 3 rows, resumable per-row runs, markdown/CSV/PNG table."""

import csv
import json

import pytest

from nmt.cli import main
from nmt.config import small
from nmt.experiments.variations import select_rows, table3_rows


def test_rows_scale_the_paper_to_the_base():
    rows = {r.name: r for r in table3_rows(small(8000))}  # N=3, d_model=256, h=4, d_k=64, d_ff=1024
    # A: d_k = d_v = d_model / h, so h * d_k stays 256 (the paper's constant computation)
    assert [(r.model["n_heads"], r.model["d_k"]) for n, r in rows.items() if n.startswith("A")] == [
        (1, 256),
        (2, 128),
        (8, 32),
        (16, 16),
    ]
    assert [r.model["d_k"] for n, r in rows.items() if n.startswith("B")] == [16, 32]
    assert rows["C1"].model == {"n_layers": 1} and rows["C3"].model == {"n_layers": 4}
    assert rows["C5"].model == {"d_model": 512, "d_k": 128, "d_v": 128}
    assert rows["D3"].train == {"label_smoothing": 0.0} and rows["E"].model == {"positional": "learned"}
    assert rows["F1"].model == {"attention_window": 2}
    assert [r.name for r in select_rows(list(rows.values()), "B,F2")] == ["base", "B1", "B2", "F2"]


def test_rows_refuse_a_base_with_separate_depths():
    import dataclasses

    from nmt.config import ConfigError

    with pytest.raises(ConfigError, match="n_encoder_layers / n_decoder_layers"):
        table3_rows(dataclasses.replace(small(8000), n_encoder_layers=6, n_decoder_layers=1))


def test_variations_end_to_end_and_resume(tiny_data, tmp_path, capsys):
    base = tmp_path / "base.yaml"
    base.write_text(
        "preset: tiny\nmodel: {n_layers: 1}\ntrain: {warmup_steps: 5, max_tokens: 512, update_tokens: 512}\n"
    )
    out = tmp_path / "t3"
    argv = [
        str(x)
        for x in (
            "variations",
            tiny_data,
            "--out",
            out,
            "--rows",
            "F1",
            "--steps",
            3,
            "--base-config",
            base,
            "--dev-sentences",
            8,
        )
    ]
    assert main(argv) == 0
    rows = list(csv.DictReader((out / "table3.csv").open()))
    assert [r["row"] for r in rows] == ["base", "F1"]
    assert rows[1]["window"] == "2" and rows[0]["window"] == ""
    assert all(r["steps"] == "3" and float(r["dev_ppl"]) > 1 for r in rows)
    assert (out / "table3.png").stat().st_size > 0 and "| F1 |" in (out / "table3.md").read_text()
    saved = json.loads((out / "F1" / "config.json").read_text())
    assert saved["model"]["attention_window"] == 2 and saved["train"]["max_steps"] == 3
    # a second invocation skips finished rows; a row whose result is lost resumes from its checkpoint
    (out / "F1" / "result.json").unlink()
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "base: finished earlier, skipped" in captured.out and "F1: training" in captured.out
    assert "resumed from" in captured.err and "stopped (" not in captured.err  # evaluated, not retrained
    assert len(list(csv.DictReader((out / "table3.csv").open()))) == 2


def test_variations_user_errors(tiny_data, tmp_path, capsys):
    assert (
        main(["variations", str(tiny_data), "--out", str(tmp_path / "x"), "--rows", "Z", "--steps", "2"]) == 2
    )
    assert "nmt variations: error: --rows: unknown row 'Z'" in capsys.readouterr().err
    # --list needs no budget and trains nothing; a run without a budget is refused before any work
    assert main(["variations", str(tiny_data), "--out", str(tmp_path / "x"), "--list", "--rows", "A1"]) == 0
    listed = capsys.readouterr().out
    assert "A1" in listed and "n_heads" in listed and not (tmp_path / "x").exists()
    # the default base is the recipe with Table 3's P_drop 0.1 (the recipe itself trains at 0.2)
    assert "multi30k-en-de.yaml" in listed and "P_drop=0.1 " in listed
    assert main(["variations", str(tiny_data), "--out", str(tmp_path / "x"), "--rows", "A1"]) == 2
    assert "give the budget per row, --steps S or --minutes M" in capsys.readouterr().err


def test_each_row_releases_its_run_directory(tiny_data, tmp_path, monkeypatch):
    """A row's run directory is released when the row ends: after training, after evaluating a row
    trained earlier (no training: `Trainer.run`, which releases, is not called), and when the
    evaluation fails. A row that kept its lock left RUN_ROOT/ROW/train.lock behind and, in the same
    process, refused the next `nmt train` on that directory."""
    import dataclasses

    from nmt import checkpoint as ckpt
    from nmt.config import tiny, train_preset
    from nmt.data.dataset import load_meta
    from nmt.experiments.variations import run_row
    from nmt.train import validation
    from nmt.train.trainer import Start, Trainer

    meta = load_meta(tiny_data)
    model_cfg = dataclasses.replace(tiny(meta["vocab_size"]), n_layers=1, d_model=32, d_ff=64, n_heads=2)
    train_cfg = dataclasses.replace(
        train_preset("tiny"), precision="fp32", max_steps=2, max_tokens=512, update_tokens=512
    )
    run = tmp_path / "base"

    def row() -> dict:
        return run_row(
            tiny_data, run, model_cfg, train_cfg, meta, dev_sentences=4, device="cpu", log=lambda m: None
        )

    assert row()["steps"] == 2 and not (run / "train.lock").exists()  # trained: Trainer.run released it
    assert row()["steps"] == 2  # trained earlier: evaluated only
    assert not (run / "train.lock").exists()

    def failing_bleu(*args, **kwargs):
        raise RuntimeError("evaluation failed")

    monkeypatch.setattr(validation, "bleu_on_split", failing_bleu)
    with pytest.raises(RuntimeError, match="evaluation failed"):
        row()
    assert not (run / "train.lock").exists()
    # the directory is free for the next owner in this process (flock: a lock held here would refuse it)
    Trainer(
        tiny_data, run, model_cfg, train_cfg, meta, Start(resume=True), device="cpu", progress=False
    ).release()
    assert [p.name for p in ckpt.list_step_checkpoints(run)] == ["step_00000002"]


def test_a_row_with_an_invalid_configuration_is_refused_before_any_training(tiny_data, tmp_path, capsys):
    """--windows 0 makes row F1 invalid (attention_window >= 1): the error names the row and comes
    before any row is trained (was: after the rows before it had trained, perhaps for hours)."""
    out = tmp_path / "t3"
    args = ["variations", str(tiny_data), "--out", str(out), "--rows", "F", "--steps", "1", "--windows", "0"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err == (
        "nmt variations: error: row F1 (model {'attention_window': 0}): "
        "model.attention_window=0: must be a positive integer or none\n"
    )
    assert not out.exists()
