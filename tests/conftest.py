"""Shared fixtures: paths to the real data (read-only, never copied into the repo)."""

import os
from pathlib import Path

import pytest
import torch

# The suite runs on 2 shared cores: one intra-op thread per test process avoids oversubscription
# (tests pin numbers, not speed).
torch.set_num_threads(1)

REPO = Path(__file__).resolve().parents[1]


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


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny random-weight checkpoint with its own SentencePiece model (translate_fixtures)."""
    from translate_fixtures import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("ckpt"))


@pytest.fixture(scope="session")
def run_dir(tiny_data, tmp_path_factory) -> Path:
    """A small checkpoint's run directory, trained once for all the serve tests (serve_fixtures)."""
    from serve_fixtures import train_small

    return train_small(tiny_data, tmp_path_factory.mktemp("serve") / "run")
