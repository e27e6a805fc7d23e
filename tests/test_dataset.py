"""nmt.data.dataset: a prepared directory read back; a missing, cut or altered meta.json or
offsets file is an error naming it."""

from __future__ import annotations

import shutil

import pytest
from data_fixtures import corpus, prepare_files
from train_fixtures import tiny_args

from nmt.cli import main
from nmt.data.dataset import ParallelDataset, load_meta
from nmt.data.download import DataError

TINY = tiny_args("--train.max_tokens=512")


def train(data, out, *extra):
    return main(["train", str(data), "--out", str(out), *TINY, *extra])


def test_load_meta_not_prepared(tmp_path):
    with pytest.raises(
        DataError,
        match=r"is not a prepared data directory \(no meta.json\); "
        r"run `nmt prepare` first",
    ):
        load_meta(tmp_path)


@pytest.mark.parametrize(
    "name, damage",
    [
        ("meta.json", lambda b: b[: len(b) // 2]),
        ("meta.json", lambda b: b"[1, 2]\n"),
        ("meta.json", lambda b: b"\xff" + b),
        ("train.tgt.offsets.npy", lambda b: b[:100]),
        ("train.tgt.offsets.npy", lambda b: b""),
    ],
)
def test_a_damaged_prepared_file_is_an_error_naming_it(tmp_path, name, damage):
    """A cut or altered meta.json or offsets file was an internal error (JSONDecodeError,
    AttributeError, UnicodeDecodeError, numpy's ValueError / EOFError) naming no file."""
    out = prepare_files(tmp_path, corpus(100))
    (out / name).write_bytes(damage((out / name).read_bytes()))
    with pytest.raises(DataError, match=rf"{out / name}: .*prepare the data again"):
        ParallelDataset.load(out, "train")


def test_truncated_data_file_is_an_error_naming_it(tiny_data, tmp_path, capsys):
    """A .bin file shorter than its offsets say is an error naming it, not silently short examples."""
    from nmt.data.dataset import ParallelDataset
    from nmt.data.download import DataError

    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    path = data / "train.tgt.bin"
    size = path.stat().st_size
    path.write_bytes(path.read_bytes()[:-6])  # a copy cut short
    expected = (
        f"{path}: {size - 6} bytes, but train.tgt.offsets.npy ends at piece {size // 2} ({size} bytes of "
        "uint16): the data folder is truncated or altered; prepare it again"
    )
    with pytest.raises(DataError) as e:
        ParallelDataset.load(data, "train")
    assert str(e.value) == expected
    assert train(data, tmp_path / "run", "--train.max_steps=1") == 2
    assert capsys.readouterr().err.strip() == f"nmt train: error: {expected}"
    assert not (tmp_path / "run").exists()
