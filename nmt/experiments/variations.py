"""`nmt variations`: the paper's Table 3 (model variations), one training run per row.

Every row is a change to a base configuration (default: ``recipes/multi30k-en-de.yaml``, N=3,
d_model=256, d_ff=1024, h=4, d_k=d_v=64), with the paper's rows scaled to that base:
    A  vary h with d_k = d_v = d_model / h (computation constant), including h = 1
    B  smaller d_k (d_k / 4, d_k / 2; the paper's 16 and 32 of 64)
    C  N x {1/3, 2/3, 4/3} (the paper's 2, 4, 8 of 6); d_model x {1/2, 2} with d_k = d_v scaled
       alike (the paper's 256/32, 1024/128); d_ff x {1/2, 2}
    D  P_drop in {0.0, 0.2}; eps_ls in {0.0, 0.2}
    E  learned positional embedding instead of sinusoids
    F  restricted self-attention (section 4, Table 1) with window r (not a row of the paper's table)
Every row gets the same budget (steps or minutes). Each row is its own run directory
``RUN_ROOT/ROW`` holding ``result.json`` when finished: an interrupted table resumes where it
stopped and finished rows are not trained again. Dev BLEU is measured as the paper's Table 3:
beam 4, alpha 0.6, no checkpoint averaging.
"""

from __future__ import annotations

import csv
import io
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..atomic import write_bytes, write_text
from ..config import ConfigError, ModelConfig, TrainConfig, apply_overrides

LETTERS = "ABCDEF"
DEFAULT_BASE = Path(__file__).resolve().parents[2] / "recipes" / "multi30k-en-de.yaml"
# Table 3's base row has P_drop 0.1 (its rows D: 0.0 and 0.2). The recipe trains at 0.2 (its
# 30-minute runs overfit at 0.1), so the default base is the recipe with the paper's 0.1.
TABLE3_BASE_DROPOUT = 0.1
COLUMNS = [
    "row",
    "N",
    "d_model",
    "d_ff",
    "h",
    "d_k",
    "d_v",
    "P_drop",
    "eps_ls",
    "window",
    "positional",
    "steps",
    "train_min",
    "dev_ppl",
    "dev_bleu",
    "params_M",
]


@dataclass
class Variation:
    """One row of Table 3: a name and the fields it changes."""

    name: str
    model: dict = field(default_factory=dict)
    train: dict = field(default_factory=dict)


def table3_rows(base: ModelConfig, *, windows: tuple[int, ...] = (2, 4)) -> list[Variation]:
    """The paper's Table 3 rows scaled to ``base``, in the paper's order ('base' first)."""
    if base.n_encoder_layers is not None or base.n_decoder_layers is not None:  # rows C vary N
        raise ConfigError(
            f"Table 3 varies N, the depth of both stacks: the base config sets "
            f"model.n_encoder_layers / n_decoder_layers ({base.depth()}); give n_layers only"
        )
    d, h, n, dk, dff = base.d_model, base.n_heads, base.n_layers, base.d_k, base.d_ff
    rows = [Variation("base")]
    heads = [x for x in (1, h // 2, 2 * h, 4 * h) if x >= 1 and x != h and d % x == 0]
    rows += [Variation(f"A{i}", {"n_heads": x, "d_k": d // x, "d_v": d // x}) for i, x in enumerate(heads, 1)]
    rows += [Variation(f"B{i}", {"d_k": x}) for i, x in enumerate((max(1, dk // 4), max(1, dk // 2)), 1)]
    layers = sorted({max(1, round(n * f)) for f in (1 / 3, 2 / 3, 4 / 3)} - {n})
    c = [{"n_layers": x} for x in layers]
    c += [
        {"d_model": int(d * f), "d_k": max(1, int(dk * f)), "d_v": max(1, int(base.d_v * f))}
        for f in (0.5, 2)
    ]
    c += [{"d_ff": int(dff * f)} for f in (0.5, 2)]
    rows += [Variation(f"C{i}", m) for i, m in enumerate(c, 1)]
    rows += [
        Variation("D1", {"dropout": 0.0}),
        Variation("D2", {"dropout": 0.2}),
        Variation("D3", train={"label_smoothing": 0.0}),
        Variation("D4", train={"label_smoothing": 0.2}),
    ]
    rows += [Variation("E", {"positional": "learned"})]
    rows += [Variation(f"F{i}", {"attention_window": r}) for i, r in enumerate(windows, 1)]
    return rows


def select_rows(rows: list[Variation], spec: str | None) -> list[Variation]:
    """``spec``: comma-separated letters (A = every A row) or row names (A1, C3); base always runs."""
    if not spec:
        return rows
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    names = {r.name for r in rows}
    for w in wanted:
        if w not in names and w not in LETTERS and w != "base":
            raise ConfigError(
                f"--rows: unknown row {w!r}; choose letters {','.join(LETTERS)} or rows "
                f"{','.join(sorted(names))}"
            )
    return [r for r in rows if r.name == "base" or r.name in wanted or r.name[0] in wanted]


def row_configs(
    base_model: ModelConfig, base_train: TrainConfig, row: Variation, *, steps: int, minutes: float
) -> tuple[ModelConfig, TrainConfig]:
    model = apply_overrides(base_model, {k: str(v) for k, v in row.model.items()}, section="model")
    budget = {
        "max_steps": steps or 10**9,
        "max_time": minutes,
        "max_epochs": 0,
        # validation loss at the end only; BLEU is measured here with the paper's beam
        "valid_every_steps": 0,
        "valid_bleu": False,
        "best_metric": "loss",
        "save_every_steps": max(1, steps // 4) if steps else 0,
        "save_every_minutes": minutes / 4 if minutes else 0.0,
        "keep_last": 2,
    }
    train = apply_overrides(
        base_train,
        {**{k: str(v) for k, v in row.train.items()}, **{k: str(v) for k, v in budget.items()}},
        section="train",
    )
    return model, train


def run_row(
    data_dir: Path,
    run_dir: Path,
    model_cfg: ModelConfig,
    train_cfg: TrainConfig,
    meta: dict,
    *,
    dev_sentences: int,
    device: str | None,
    log,
) -> dict:
    """Train (or resume) one row, then measure dev perplexity and dev BLEU (beam 4, alpha 0.6). The
    row's run directory is released when the row ends, also on an error."""
    from .. import checkpoint as ckpt
    from ..infer.options import SearchOptions
    from ..train.trainer import Start, Trainer
    from ..train.validation import bleu_on_split

    resume = bool(ckpt.list_step_checkpoints(run_dir))
    if not resume and run_dir.exists():  # stopped before its first checkpoint: nothing to keep
        import shutil

        shutil.rmtree(run_dir)
    trainer = Trainer(
        data_dir, run_dir, model_cfg, train_cfg, meta, Start(resume=resume), device=device, progress=False
    )
    try:
        done = (train_cfg.max_steps and trainer.progress.update >= train_cfg.max_steps) or (
            train_cfg.max_time and trainer.progress.elapsed >= train_cfg.max_time * 60
        )
        if not done:
            trainer.run()
        t0 = time.time()
        dev = trainer.validate()
        bleu = bleu_on_split(
            trainer.model,
            data_dir,
            "valid",
            SearchOptions(beam=4, alpha=0.6),
            max_sentences=dev_sentences,
            device=trainer.device,
        )
    finally:
        trainer.release()  # Trainer.run released it; a row trained earlier is only evaluated
    log(
        f"{run_dir.name}: step {trainer.progress.update}, dev ppl {dev['ppl']:.2f}, "
        f"dev BLEU {bleu['bleu']:.2f} (evaluation {time.time() - t0:.0f} s)"
    )
    return row_result(trainer, dev=dev, bleu=bleu, dev_sentences=dev_sentences)


def row_result(trainer, *, dev: dict, bleu: dict, dev_sentences: int) -> dict:
    """The row of Table 3 (``COLUMNS``, and how its BLEU was measured) of a trained ``trainer``."""
    m = trainer.model_cfg
    return {
        "row": trainer.run_dir.name,
        "N": m.n_layers,
        "d_model": m.d_model,
        "d_ff": m.d_ff,
        "h": m.n_heads,
        "d_k": m.d_k,
        "d_v": m.d_v,
        "P_drop": m.dropout,
        "eps_ls": trainer.cfg.label_smoothing,
        "window": m.attention_window or "",
        "positional": m.positional,
        "steps": trainer.progress.update,
        "train_min": round(trainer.progress.elapsed / 60, 2),
        "dev_ppl": round(dev["ppl"], 2),
        "dev_bleu": round(bleu["bleu"], 2),
        "params_M": round(sum(p.numel() for p in trainer.model.parameters()) / 1e6, 2),
        "dev_sentences": dev_sentences or "all",
        "bleu_signature": bleu["bleu_signature"],
    }


def write_table(results: list[dict], out: Path) -> None:
    """RUN_ROOT/table3.md, table3.csv and table3.png (dev BLEU per row)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(results)
    write_text(out / "table3.csv", buf.getvalue())
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in results]
    write_text(out / "table3.md", "\n".join(lines) + "\n")
    try:
        import matplotlib
    except ImportError:  # the plot is optional (pip install nmt[plot]); the table is written
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(4, 0.55 * len(results)), 3.2))
    names = [r["row"] for r in results]
    ax.bar(
        names, [r["dev_bleu"] for r in results], color=["#555" if n == "base" else "#4a7ab5" for n in names]
    )
    ax.axhline(
        results[0]["dev_bleu"] if results and results[0]["row"] == "base" else 0,
        color="#555",
        lw=0.8,
        ls="--",
    )
    ax.set_ylabel("dev BLEU (beam 4)")
    ax.set_title("Table 3 variations")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=120)
    plt.close(fig)
    write_bytes(out / "table3.png", png.getvalue())
