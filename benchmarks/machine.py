"""What the benchmarks print beside every figure: the CPU they ran on (its figures are compared only
within one run on one machine)."""

from __future__ import annotations

import platform
import shlex
import sys
from pathlib import Path


def cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo (else what the platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def cpu_detail() -> str:
    """cpu_name with the instruction sets that choose nmt's kernels (AVX2, AVX-512, bf16, AMX)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nmt.precision import cpu_flags

    flags = cpu_flags()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{cpu_name()} ({', '.join(shown) or 'no AVX2'}{'' if 'amx_bf16' in flags else ', no AMX'})"


def provenance(script: str) -> dict:
    """What a benchmark's JSON table records beside its rows: the command, the CPU, torch and its
    threads, the commit and the date (scripts/figures.py prints them under the table)."""
    import subprocess
    import time

    import torch

    here = Path(__file__).resolve().parents[1]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True)
    return {
        "command": f"python benchmarks/{script}.py " + shlex.join(sys.argv[1:]),
        "cpu_detail": cpu_detail(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "commit": commit.stdout.strip(),
        "date": time.strftime("%Y-%m-%d"),
        "source": f"the JSON benchmarks/{script}.py --json wrote",
    }


def write_table(path: str, script: str, **fields) -> None:
    """A benchmark's table as JSON: ``fields`` (what, columns, rows, ...) and its provenance."""
    import json

    table = {**fields, **provenance(script)}
    Path(path).write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
