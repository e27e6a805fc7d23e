"""The CPU path a process takes, observed, against the one its environment forces (conftest.py: a run
under a forced path that was not taken stops before its first test).

Each library reads its variable when it loads and says nothing when it ignores a value (a misspelt
``ONEDNN_MAX_CPU_ISA=AVX512``, ``ATEN_CPU_CAPABILITY=avx512`` on a CPU without AVX-512), so the path is
read back from each: torch's kernels from ``torch.backends.cpu.get_cpu_capability()``, oneDNN's ISA
from the ``isa:`` line it prints under ``ONEDNN_VERBOSE=1``, CTranslate2's from the "Selected ISA" it
logs under ``CT2_VERBOSE=1`` when it loads a model, and the precision `auto` picks from
nmt.precision. ``observe`` runs ``probe`` in a fresh interpreter (the verbose variables set, the
libraries loaded for the first time), about 3 s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# oneDNN's name of each ISA it may be held to (its verbose line, oneDNN 3.x); AMX's name is longer
# and depends on the version: it contains "Intel AMX"
ONEDNN_ISA_NAMES = {
    "SSE41": "Intel SSE4.1",
    "AVX": "Intel AVX",
    "AVX2": "Intel AVX2",
    "AVX2_VNNI": "Intel AVX2 with Intel DL Boost",
    "AVX512_CORE": "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions",
    "AVX512_CORE_VNNI": "Intel AVX-512 with Intel DL Boost",
    "AVX512_CORE_BF16": "Intel AVX-512 with Intel DL Boost and bfloat16 support",
}
PROBE_LINE = "cpu-path-probe: "


@dataclass(frozen=True)
class Observed:
    torch_capability: str  # torch.backends.cpu.get_cpu_capability(): DEFAULT, AVX2, AVX512, ...
    onednn_isa: str  # the ISA oneDNN (torch's) runs, as its verbose line names it
    ct2_isa: str | None  # the ISA CTranslate2 selected; None: ctranslate2 not installed
    auto: str  # what `auto` picks on the CPU: "bf16" or "fp32"


def probe() -> None:
    """In a fresh interpreter with ONEDNN_VERBOSE=1 and CT2_VERBOSE=1 (``observe``): runs one oneDNN
    primitive and loads a tiny CTranslate2 model, then prints torch's capability and `auto`'s pick."""
    import ctypes
    import tempfile

    import torch

    from nmt.precision import resolve_precision

    if torch.backends.mkldnn.is_available():  # oneDNN prints its isa: line
        torch.ops.mkldnn._reorder_linear_weight(torch.randn(8, 8))
    ctypes.CDLL(None).fflush(None)  # before the line below, on the same stdout
    found = {"torch": torch.backends.cpu.get_cpu_capability(), "ct2": "not installed"}
    found["auto"] = "bf16" if resolve_precision("auto", "cpu")[0] == torch.bfloat16 else "fp32"
    try:
        import ctranslate2

        from nmt.config import tiny
        from nmt.export.ctranslate2 import export_model
        from nmt.model import Transformer

        vocab = ["<pad>", "<unk>", "<s>", "</s>", "a", "b", "c", "d"]
        with tempfile.TemporaryDirectory() as tmp:
            ctranslate2.Translator(str(export_model(Transformer(tiny(len(vocab))), vocab, Path(tmp) / "m")))
        found["ct2"] = "logged"
    except ImportError:
        pass
    except ValueError as e:  # CTranslate2 refuses a CT2_FORCE_CPU_ISA it does not know
        found["ct2"] = f"refused: {e}"
    print(PROBE_LINE + json.dumps(found), flush=True)


def observe(env: dict[str, str]) -> Observed:
    """The CPU path of a fresh process under ``env`` (``probe``)."""
    return observe_each(env)[0]


def observe_each(*envs: dict[str, str]) -> list[Observed]:
    """The CPU path of a fresh process under each of ``envs`` (``probe``), the processes side by side."""
    tests = str(Path(__file__).resolve().parent)
    code = "import cpu_path_fixtures; cpu_path_fixtures.probe()"
    procs = []
    for env in envs:
        env = {**env, "ONEDNN_VERBOSE": "1", "CT2_VERBOSE": "1"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", code],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        return [observed(proc, *proc.communicate(timeout=120)) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def observed(proc: subprocess.Popen, stdout: str, stderr: str) -> Observed:
    """What ``probe`` printed, read."""
    found = [
        json.loads(line[len(PROBE_LINE) :]) for line in stdout.splitlines() if line.startswith(PROBE_LINE)
    ]
    isa = re.findall(r"^onednn_verbose,.*?,info,cpu,isa:(.*)$", stdout, re.M)
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"the CPU path probe failed (exit {proc.returncode}):\n{stderr[-3000:]}")
    ct2 = found[0]["ct2"]
    if ct2 == "logged":
        selected = re.findall(r"Selected ISA: (\S+)", stderr)
        ct2 = selected[0] if selected else "not logged"
    onednn = isa[0].strip() if isa else "none (no oneDNN in this torch)"
    return Observed(found[0]["torch"], onednn, None if ct2 == "not installed" else ct2, found[0]["auto"])


def onednn_isa_matches(forced: str, isa: str) -> bool | None:
    """Whether oneDNN's ``isa`` is the one ``ONEDNN_MAX_CPU_ISA=forced`` holds it to; None: a value
    whose name this table does not know."""
    forced = forced.upper()
    if forced == "AVX512_CORE_AMX":
        return "Intel AMX" in isa
    return None if forced not in ONEDNN_ISA_NAMES else isa == ONEDNN_ISA_NAMES[forced]


def not_taken(forced: dict[str, str], seen: Observed) -> list[str]:
    """One line per variable of ``forced`` (the environment) whose path ``seen`` did not take."""
    out = []
    if forced.get("ATEN_CPU_CAPABILITY") and seen.torch_capability != forced["ATEN_CPU_CAPABILITY"].upper():
        out.append(f"ATEN_CPU_CAPABILITY={forced['ATEN_CPU_CAPABILITY']}: torch runs {seen.torch_capability}")
    if forced.get("ONEDNN_MAX_CPU_ISA"):
        match = onednn_isa_matches(forced["ONEDNN_MAX_CPU_ISA"], seen.onednn_isa)
        if not match:
            known = ", ".join([*ONEDNN_ISA_NAMES, "AVX512_CORE_AMX"])
            why = "cannot be checked (known: " + known + ")" if match is None else "not taken"
            out.append(
                f"ONEDNN_MAX_CPU_ISA={forced['ONEDNN_MAX_CPU_ISA']}: oneDNN runs {seen.onednn_isa}; {why}"
            )
    ct2 = forced.get("CT2_FORCE_CPU_ISA")
    if ct2 and seen.ct2_isa is not None and seen.ct2_isa != ct2:
        said = seen.ct2_isa if seen.ct2_isa.startswith("refused") else f"selected {seen.ct2_isa}"
        out.append(f"CT2_FORCE_CPU_ISA={ct2}: CTranslate2 {said}")
    if forced.get("NMT_PRECISION") in ("fp32", "bf16") and seen.auto != forced["NMT_PRECISION"]:
        out.append(f"NMT_PRECISION={forced['NMT_PRECISION']}: `auto` picks {seen.auto}")
    return out
