"""nmt.data.dataset: a prepared directory read back; a missing, cut or altered meta.json or
offsets file is an error naming it."""

import pytest
from data_fixtures import corpus, prepare_files

from nmt.data.dataset import ParallelDataset, load_meta
from nmt.data.download import DataError


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
