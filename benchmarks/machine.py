"""What the benchmarks print beside every figure: the CPU they ran on (its figures are compared only
within one run on one machine)."""

from __future__ import annotations

import os
import platform
import re
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the corpora of a run on this project's machines (../shared/data, /work/shared/data, ...): the reader's
# $NMT_DATA_DIR
SHARED_DATA = re.compile(r"""(?<=[\s='"])(?:[^\s'"=]*/)?shared/data(?=/)""")
# an absolute path left as an option's value or an argument: a file of the machine that ran the command
ABSOLUTE = re.compile(r"""(?P<option>(?:^|(?<=\s))--?[\w-]+[ =])?(?<![\w.$-])(?P<path>'/[^']*'|/[^\s'"]+)""")
OUTPUTS = ("--json", "--markdown", "--out", "--output", "-o")


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
    sys.path.insert(0, str(REPO))
    from nmt.precision import cpu_flags

    flags = cpu_flags()
    shown = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags]
    return f"{cpu_name()} ({', '.join(shown) or 'no AVX2'}{'' if 'amx_bf16' in flags else ', no AMX'})"


def data_dir() -> Path:
    """Where nmt reads the corpora: $NMT_DATA_DIR, else `nmt prepare`'s default."""
    return Path(os.environ.get("NMT_DATA_DIR") or Path.home() / ".cache" / "nmt" / "data").resolve()


def public_command(command: str, data_dirs: tuple[str, ...] = ()) -> str:
    """``command`` with only paths a reader has: the corpora under ``data_dirs`` (or a shared/data
    folder) as ``$NMT_DATA_DIR/...``, this checkout's files relative to it, and any other absolute path
    as a placeholder: ``OUT.md`` for an output option's file (``--json``, ``--markdown``, ``--out``,
    ``-o``), the option's name in capitals for another (``--before BEFORE``), ``PATH`` for an argument."""
    for folder in data_dirs:
        command = re.sub(re.escape(folder.rstrip("/")) + r"(?=/|\s|$)", "$NMT_DATA_DIR", command)
    command = SHARED_DATA.sub("$NMT_DATA_DIR", command).replace(f"{REPO}/", "")

    def placeholder(m: re.Match) -> str:
        option = (m.group("option") or "").rstrip(" =")
        suffix = "".join(Path(m.group("path").strip("'")).suffixes[-1:])
        if not option:
            return "PATH" + suffix
        name = "OUT" if option in OUTPUTS else option.lstrip("-").replace("-", "_").upper()
        return f"{m.group('option')}{name}{suffix}"

    return ABSOLUTE.sub(placeholder, command)


def command_line(script: str) -> str:
    """The command that runs this benchmark, as a published page shows it (`public_command`)."""
    return public_command(f"python benchmarks/{script}.py " + shlex.join(sys.argv[1:]), (str(data_dir()),))


# the environment variables that hold a library to another CPU code path than its own choice
CPU_PATH_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "CT2_FORCE_CPU_ISA",
    "NMT_PRECISION",
)


def cpu_path() -> dict:
    """The CPU path variables set in this process's environment (``forced``) and the kernels torch
    runs (``torch_kernels``, torch.backends.cpu.get_cpu_capability(): AVX2, AVX512, ...)."""
    import torch

    forced = {name: os.environ[name] for name in CPU_PATH_VARIABLES if os.environ.get(name)}
    return {"forced": forced, "torch_kernels": torch.backends.cpu.get_cpu_capability()}


def provenance(script: str) -> dict:
    """What a benchmark's JSON table records beside its rows: the command, the CPU and the code path
    taken on it, torch and its threads, the commit and the date (scripts/figures.py prints them
    under the table)."""
    import subprocess
    import time

    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {
        "command": command_line(script),
        "cpu_detail": cpu_detail(),
        "cpu_path": cpu_path(),
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
