"""benchmarks/import_marian.py (the time and peak memory of `nmt import huggingface` at OPUS-MT's size)
at a tiny size: what it builds, measures, checks and writes."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import CPU_PATH_VARIABLES

REPO = Path(__file__).resolve().parents[1]
TINY = [
    "--vocab",
    "400",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--positions",
    "32",
]
TINY += ["--spm-vocab", "120", "--sentences", "600", "--check-sentences", "3", "--max-len", "6"]


def test_the_import_of_a_tiny_marian_is_measured_and_its_greedy_outputs_checked(tmp_path):
    """It builds the MarianMTModel (a vocab.json of exactly --vocab entries, separate source and target
    SentencePiece models), imports it in a child process, prints one row whose greedy check holds on
    every sentence, writes its JSON with the CPU and the command (no path of this machine); with
    --workdir the Marian directory is kept, and reused by a run of the same settings."""
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    argv = [sys.executable, str(REPO / "benchmarks" / "import_marian.py"), *TINY]
    argv += ["--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "r.json")]
    env = {k: os.environ[k] for k in CPU_PATH_VARIABLES if k in os.environ}
    env.update(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", PATH="/usr/bin:/bin")
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = [c.strip() for c in proc.stdout.strip().splitlines()[-1].split("|")[1:-1]]
    assert row[:3] == ["400", "16", "1+1"] and row[-1] == "3/3"
    hf = tmp_path / "work" / "hf"
    assert len(json.loads((hf / "vocab.json").read_text())) == 400
    assert (hf / "source.spm").read_bytes() != (hf / "target.spm").read_bytes()
    assert (tmp_path / "work" / "out" / "target_spm.model").is_file()
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["measured"]["peak_rss_mib"] > 0 and result["measured"]["seconds"] > 0
    assert result["cpu_detail"] and "--json OUT.json" in result["command"]
    assert str(tmp_path) not in result["command"]
    built = (hf / "model.safetensors").stat().st_mtime_ns
    bench = benchmark()
    args = bench.parse_args([*TINY, "--workdir", str(tmp_path / "work")])
    assert bench.marian_dir(tmp_path / "work", args)[0] == hf  # the same settings: reused, not rebuilt
    assert (hf / "model.safetensors").stat().st_mtime_ns == built


def benchmark():
    """benchmarks/import_marian.py as a module."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    spec = importlib.util.spec_from_file_location("import_marian", REPO / "benchmarks" / "import_marian.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
