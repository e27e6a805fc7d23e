"""Loss, perplexity and learning-rate curves from RUN_DIR/metrics.jsonl as PNG (`nmt plot RUN_DIR`)."""

from __future__ import annotations

import json
from pathlib import Path


def read_metrics(run_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """The train and the valid records of RUN_DIR/metrics.jsonl, each with its "update" (the
    "step" of a run that wrote that name)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no metrics (is {run_dir} a run directory of `nmt train`?)")
    train, valid = [], []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            from ..data.download import DataError  # a user error: `nmt` prints one line

            raise DataError(f"{path}:{lineno}: not a JSON line") from None
        if "update" not in record and "step" in record:
            record["update"] = record.pop("step")
        (valid if record.get("split") == "valid" else train).append(record)
    return train, valid


def plot(run_dir: str | Path, out: str | Path | None = None) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train, valid = read_metrics(run_dir)
    out_dir = Path(out or run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    panels = [
        ("loss", "label-smoothed loss (nats/token)", "loss"),
        ("ppl", "perplexity (no smoothing)", "ppl"),
        ("lr", "learning rate", "lr"),
    ]
    for key, title, name in panels:
        fig, ax = plt.subplots(figsize=(7, 4))
        ax.plot([r["update"] for r in train if key in r], [r[key] for r in train if key in r], label="train")
        if key != "lr" and valid:
            ax.plot(
                [r["update"] for r in valid if key in r],
                [r[key] for r in valid if key in r],
                "o-",
                label="valid",
            )
        if key == "ppl":
            ax.set_yscale("log")
        ax.set_xlabel("update")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend()
        path = out_dir / f"{name}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
