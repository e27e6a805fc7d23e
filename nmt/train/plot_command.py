"""`nmt plot RUN_DIR [--out DIR]`: its arguments, and the run that writes nmt/train/plot.py's curves and
prints each PNG's path."""

from __future__ import annotations

from .plot import plot


def add_plot_args(parser) -> None:
    parser.add_argument("run_dir")
    parser.add_argument("--out", help="folder for the PNG files (default: RUN_DIR)")


def run_plot(args, overrides: dict) -> int:
    for path in plot(args.run_dir, args.out):
        print(path)
    return 0
