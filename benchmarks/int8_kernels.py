"""fbgemm's against oneDNN's dynamic int8 product, per weight shape of a model, by rows: where
``nmt.infer.int8_linear.many_from`` should switch on this CPU.

    python benchmarks/int8_kernels.py --checkpoint runs/demo/average --threads 1 [--json OUT.json]

For each distinct (in, out) shape of the model's int8 layers, one call of each kernel at each row
count of --rows on random rows (the best of --repeat, the kernels alternating), its
microseconds and fbgemm / oneDNN (above 1: oneDNN faster), and the rows from which the rule sends
that shape to oneDNN. Activations over the range nmt uses on this CPU (``full_range``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from machine import cpu_detail, write_table  # noqa: E402

from nmt.infer.int8_linear import NEVER, Int8Linear, full_range, many_from, prepack  # noqa: E402

SCRIPT = "int8_kernels"


def shapes_of(checkpoint: str) -> list[tuple[int, int]]:
    """The distinct (in, out) shapes of the int8 layers nmt builds for ``checkpoint``."""
    from nmt.infer.translate import Translator

    t = Translator.load(checkpoint, device="cpu", precision="int8")
    found = {(m.in_features, m.out_features) for m in t.model.modules() if isinstance(m, Int8Linear)}
    return sorted(found)


def time_shape(layer: Int8Linear, rows: list[int], repeat: int) -> list[tuple[float, float]]:
    """(fbgemm us, oneDNN us) at each row count, the best of ``repeat`` alternating calls."""
    x = torch.randn(max(rows), layer.in_features)  # (R, in)
    kernels = (layer.few, prepack(*layer._weight_bias(), "onednn"))
    out = []
    for n in rows:
        best = [float("inf"), float("inf")]
        for _ in range(repeat):
            for i, packed in enumerate(kernels):
                start = time.perf_counter()
                torch.ops.quantized.linear_dynamic(x[:n], packed, layer.reduce_range)
                best[i] = min(best[i], time.perf_counter() - start)
        out.append((1e6 * best[0], 1e6 * best[1]))
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rows", default="3,16,64,128,256,512,2000")
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--json", help="write the table here (benchmarks/machine.write_table)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    rows = [int(r) for r in args.rows.split(",")]
    columns = ["weight (in x out)", "rows", "fbgemm us", "oneDNN us", "fbgemm / oneDNN", "nmt uses"]
    table = []
    for i, o in shapes_of(args.checkpoint):
        weight = torch.quantize_per_channel(
            torch.randn(o, i),
            torch.full((o,), 0.01, dtype=torch.double),
            torch.zeros(o, dtype=torch.long),
            0,
            torch.qint8,
        )  # (out, in)
        layer = Int8Linear(weight, torch.randn(o), reduce_range=not full_range())
        if "onednn" not in torch.backends.quantized.supported_engines:
            print("this torch has no oneDNN int8 engine: nothing to compare")
            return 1
        switch = many_from(i, o, args.threads)
        for n, (fb, on) in zip(rows, time_shape(layer, rows, args.repeat)):
            uses = "oneDNN" if n >= switch else "fbgemm"
            table.append([f"{i} x {o}", str(n), f"{fb:.0f}", f"{on:.0f}", f"{fb / on:.2f}", uses])
        print(f"{i} x {o}: oneDNN from {'never' if switch >= NEVER else switch} rows", flush=True)
    print(
        f"CPU: {cpu_detail()}; torch {torch.__version__}; {args.threads} thread(s); full range {full_range()}"
    )
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in table:
        print("| " + " | ".join(row) + " |")
    if args.json:
        write_table(
            args.json,
            SCRIPT,
            what=f"dynamic int8 products by shape of {args.checkpoint}'s layers, fbgemm against oneDNN",
            columns=columns,
            rows=table,
            threads=args.threads,
            full_range=full_range(),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
