"""Shared fixtures: paths to the real data (read-only, never copied into the repo); the CPU path
the suite runs on and tolerances derived from dtype and accumulation length.

One machine takes another CPU's path through the environment, set before Python starts (torch,
oneDNN and CTranslate2 read it when they load):

    ATEN_CPU_CAPABILITY=default|avx2|avx512   torch's own kernels
    ONEDNN_MAX_CPU_ISA=AVX2|AVX512_CORE|AVX512_CORE_BF16|AVX512_CORE_AMX   oneDNN's (linear layers)
    CT2_FORCE_CPU_ISA=AVX2|AVX512             CTranslate2's
    NMT_PRECISION=fp32|bf16                   what nmt's `auto` precision picks (nmt/precision.py)

`make test` runs the tests marked ``numerics`` a second time under ``AVX2_ONLY`` (an AVX2-only CPU:
no fast bf16, so `auto` is fp32) and a third under ``AVX2_BF16`` (the same CPU told to use bf16: bf16
emulated); the header of every run names the path it took, and a run under a forced path that was not
taken stops before its first test (pytest_configure, cpu_path_fixtures).
"""

import math
import os
import shutil
from pathlib import Path

import pytest
import torch

# The suite runs on 2 shared cores: one intra-op thread per test process avoids oversubscription
# (tests pin numbers, not speed).
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]

# An AVX2-only CPU (bf16 emulated, so `auto` -> fp32), taken by any x86 CPU (Makefile: test)
AVX2_ONLY = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # MKL row-dependent there: nmt.infer.linear_kernel
    "CT2_FORCE_CPU_ISA": "AVX2",
    "NMT_PRECISION": "fp32",
}
# The same CPU with `auto` forced to bf16, which it lacks: emulated bf16 (Makefile: test-bf16)
AVX2_BF16 = {**AVX2_ONLY, "NMT_PRECISION": "bf16"}
CPU_PATH_VARIABLES = tuple(AVX2_ONLY)  # the variables a forced run sets
OBSERVED_PATH = pytest.StashKey()  # cpu_path_fixtures.Observed of a run under a forced path


# `make test-fast` (pytest -m "not slow"), the edit loop: these files, and every test that uses one of
# these fixtures (each trains a model first), are marked slow. The rest runs in under 2 minutes on
# 2 cores; `make test` runs everything.
SLOW_FILES = {
    "test_benchmarks.py",
    "test_cuda.py",
    "test_distill.py",
    "test_distributed.py",
    "test_onnx.py",
    "test_finetune.py",
    "test_import_marian.py",
    "test_libreoffice.py",
    "test_multilingual.py",
    "test_paper_training.py",
    "test_recipes.py",
    "test_serve_fuzz.py",
    "test_train_chaos.py",
    "test_variations.py",
}
SLOW_FIXTURES = {
    "distilled",
    "multi_run",
    "parent",
    "run_dir",
    "straight_final_checkpoint",
    "straight_run",
    "teacher",
    "trained_tiny_run",
}


# numerics tests in files that are not numerics as a whole (their other tests check logic, not floats)
NUMERICS_TESTS = {"test_benchmarks.py": {"test_tiny_run_on_the_cpu_prints_one_table_of_every_kind_of_row"}}


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if item.originalname in NUMERICS_TESTS.get(item.path.name, ()):
            item.add_marker(pytest.mark.numerics)


def auto_dtype_here() -> torch.dtype:
    """The dtype of matrix products under `auto` on this process's CPU path (bf16 or fp32)."""
    from nmt.precision import resolve_precision

    return resolve_precision("auto", "cpu")[0] or torch.float32


def forced_cpu_path() -> dict[str, str]:
    """The variables of CPU_PATH_VARIABLES set in this process's environment."""
    return {k: os.environ[k] for k in CPU_PATH_VARIABLES if os.environ.get(k)}


def pytest_configure(config):
    """A run under a forced CPU path stops before its first test unless torch, oneDNN, CTranslate2
    and `auto` took that path (cpu_path_fixtures: each read back, as a library ignores a value it
    does not take without a word); the header names what they took."""
    if forced_cpu_path():
        from cpu_path_fixtures import not_taken, observe

        config.stash[OBSERVED_PATH] = seen = observe(dict(os.environ))
        missed = not_taken(forced_cpu_path(), seen)
        if missed:
            raise pytest.UsageError("the forced CPU path was not taken:\n  " + "\n  ".join(missed))


def pytest_report_header(config):
    from nmt.precision import resolve_precision

    forced = " ".join(f"{k}={v}" for k, v in forced_cpu_path().items())
    seen = config.stash.get(OBSERVED_PATH, None)
    taken = f"taken: oneDNN {seen.onednn_isa}, CTranslate2 {seen.ct2_isa}" if seen else "nothing to check"
    return (
        f"cpu path: torch kernels {torch.backends.cpu.get_cpu_capability()}, "
        f"precision auto -> {resolve_precision('auto', 'cpu')[1]}; forced: {forced or 'nothing'} ({taken})"
    )


def tol(dtype: torch.dtype, n_accum: int, *, scale: float = 1.0, c: float = 4.0) -> float:
    """An absolute tolerance for comparing one value computed by two float paths (two kernels, two
    orders of summation, cached against full recomputation) in ``dtype``.

    Derivation: each rounding to ``dtype`` has a relative error of at most u = eps / 2
    (``torch.finfo(dtype).eps``). A value obtained through ``n_accum`` roundings (the length of the
    longest chain of additions and products behind it: e.g. d_model + d_ff per layer times the
    layers, plus the vocabulary's log-sum-exp) carries an error whose worst case is n * u * scale
    but whose errors are independent and of either sign, so its typical size is sqrt(n) * u *
    scale, ``scale`` being the size of the terms (|value| for log-probs and LayerNorm'd
    activations ~1). Two paths differ by sqrt(2) times that; c = 4 (the default) is ~8 standard
    deviations of one path, room for the largest of some 10^4 compared values. So:

        tol = c * eps(dtype) * sqrt(n_accum) * scale

    fp32, n = 1,000, scale 1: 1.5e-5; bf16 (eps 2^-7), same: 1.0. A test passes ``c`` larger where
    the errors are known to add up in one direction (it says why beside the assert).
    """
    return c * torch.finfo(dtype).eps * math.sqrt(n_accum) * scale


@pytest.fixture(autouse=True)
def one_torch_thread():
    """The suite's one thread again after a test that changed it (a run with num_threads 2 set it for
    the process: the next tests then ran 2 threads on shared cores, 5x slower under load)."""
    yield
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)


@pytest.fixture(scope="session")
def shared_data_dir() -> Path:
    """$NMT_DATA_DIR, else <repo>/../shared/data; skips the test when neither exists."""
    env = os.environ.get("NMT_DATA_DIR")
    path = Path(env) if env else REPO.parent / "shared" / "data"
    if not path.is_dir():
        pytest.skip(
            f"real data not found at {path}: set NMT_DATA_DIR to the shared data folder "
            "(multi30k/, libreoffice_help/, wmt14_en_de/, ...)"
        )
    return path


@pytest.fixture(scope="session")
def multi30k_dir(shared_data_dir: Path) -> Path:
    """The shared folder if it holds Multi30k en-de; skips otherwise."""
    need = [f"{s}.{lang}.gz" for s in ("train", "valid", "test") for lang in ("en", "de")]
    missing = [n for n in need if not (shared_data_dir / "multi30k" / n).is_file()]
    if missing:
        pytest.skip(f"Multi30k not found in {shared_data_dir}/multi30k (missing {missing})")
    return shared_data_dir


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """A prepared DATA_DIR of a tiny synthetic en-de corpus (made here, no downloads)."""
    from train_fixtures import prepare_tiny

    return prepare_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="session")
def trained_tiny_run(tiny_data, tmp_path_factory) -> Path:
    """A tiny model trained for a few seconds (200 updates) on ``tiny_data``: non-trivial,
    input-dependent greedy outputs. Read-only: a test that changes it copies it first."""
    from train_fixtures import tiny_args

    from nmt.cli import main

    run = tmp_path_factory.mktemp("trained") / "run"
    budget = [
        "--train.max_steps=200",
        "--train.max_tokens=1024",
        "--train.accum_steps=1",
        "--train.lr_scale=0.3",
    ]
    args = ["train", str(tiny_data), "--out", str(run), *tiny_args("--train.log_every_steps=1000"), *budget]
    assert main(args) == 0
    return run


@pytest.fixture(scope="session")
def tiny_test_lines(tiny_data) -> list[str]:
    """The English side of ``tiny_data``'s test split (40 lines)."""
    return (tiny_data.parent / "text" / "test.en").read_text().splitlines()


@pytest.fixture(scope="session")
def finished_tiny_run(tiny_data, tmp_path_factory) -> Path:
    """A tiny run finished at max_steps=2 with step_1, step_2 and best. Read-only: a test that
    changes it takes ``finished_run_copy``."""
    from train_fixtures import tiny_args

    from nmt.cli import main

    out = tmp_path_factory.mktemp("finished") / "run"
    argv = ["train", str(tiny_data), "--out", str(out), *tiny_args("--train.max_tokens=512")]
    assert main([*argv, "--train.max_steps=2", "--train.save_every_steps=1"]) == 0
    return out


@pytest.fixture
def finished_run_copy(finished_tiny_run, tmp_path) -> Path:
    """This test's own copy of ``finished_tiny_run``."""
    shutil.copytree(finished_tiny_run, tmp_path / "run")
    return tmp_path / "run"


@pytest.fixture(scope="session")
def long_valid_data(tmp_path_factory):
    """The tiny corpus with one 400-word valid pair (longer than the tiny preset's 256 positions)."""
    from train_fixtures import GERMAN, WORDS, write_corpus

    from nmt.data.prepare import PrepareOptions, prepare

    folder = tmp_path_factory.mktemp("longvalid")
    splits = write_corpus(folder / "text", n_train=300, n_valid=10)
    words = [WORDS[i % len(WORDS)] for i in range(400)]
    with open(splits["valid"][0], "a") as f:
        f.write(" ".join(words) + "\n")
    with open(splits["valid"][1], "a") as f:
        f.write(" ".join(GERMAN[w] for w in words) + "\n")
    lines = []
    prepare(
        splits,
        folder / "data",
        log=lines.append,
        options=PrepareOptions(
            dataset="files", src_lang="en", tgt_lang="de", vocab_size=120, threads=1, max_len=100
        ),
    )
    return folder / "data", lines


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A tiny random-weight checkpoint with its own SentencePiece model (translate_fixtures)."""
    from translate_fixtures import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def imported_marian(tmp_path_factory) -> tuple[Path, Path]:
    """(a MarianMTModel directory built with transformers: random weights, separate source.spm and
    target.spm trained on English and German, import_fixtures.make_marian; its `nmt import
    huggingface` checkpoint, with spm.model and target_spm.model); skipped without transformers."""
    pytest.importorskip("transformers", reason="transformers not installed (pip install 'nmt[hf]')")
    from import_fixtures import make_marian

    from nmt.imports.from_marian import import_huggingface

    folder = tmp_path_factory.mktemp("marian")
    make_marian(folder / "hf")
    import_huggingface(str(folder / "hf"), folder / "ckpt")
    return folder / "hf", folder / "ckpt"


@pytest.fixture(scope="session")
def run_dir(tiny_data, tmp_path_factory) -> Path:
    """A small checkpoint's run directory, trained once for all the serve tests (serve_fixtures)."""
    from serve_fixtures import train_small

    return train_small(tiny_data, tmp_path_factory.mktemp("serve") / "run")


@pytest.fixture(scope="module")
def run_dir_translator(run_dir):
    """The Translator of ``run_dir`` (float32, CPU)."""
    from nmt.infer.translate import Translator

    return Translator.load(run_dir, device="cpu", precision="fp32")


@pytest.fixture(scope="module")
def serve_client(run_dir):
    """A TestClient of `nmt serve` on ``run_dir`` with small limits (500 characters, 20 sentences)."""
    from fastapi.testclient import TestClient
    from serve_fixtures import make_app

    from nmt.serve.app import Limits

    app, _ = make_app(run_dir, limits=Limits(max_chars=500, max_sentences=20))
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="module")
def random_transformer():
    """A random-weight Transformer(tiny(40)) (seed 0) in eval mode."""
    from nmt.config import tiny
    from nmt.model import Transformer

    torch.manual_seed(0)
    return Transformer(tiny(40)).eval()


@pytest.fixture(scope="module")
def early_eos_model(random_transformer):
    """``random_transformer`` with +4 on the EOS logit after a token id divisible by 3
    (search_fixtures.EarlyEos): outputs of different lengths."""
    from search_fixtures import EarlyEos

    return EarlyEos(random_transformer)
