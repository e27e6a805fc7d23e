"""`nmt prepare` with long valid pairs (counted and kept, with one warning) and killed inside its swap
of the data directory (the old data back at the next run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from nmt.cli import main


# ----------------------------------------------------------------------------- long validation pairs
def test_prepare_warns_about_long_valid_pairs(long_valid_data):
    """prepare counts (and keeps) valid/test pairs longer than --max-len."""
    data, lines = long_valid_data
    meta = json.loads((data / "meta.json").read_text())
    assert meta["cleaning"]["valid"]["longer_than_max_len"] == 1
    assert meta["cleaning"]["test"]["longer_than_max_len"] == 0 and meta["splits"]["valid"]["pairs"] == 11
    assert [line for line in lines if line.startswith("warning:")] == [
        "warning: valid: 1 pairs have a side longer than --max-len 100 pieces (kept; validation and "
        "translation truncate them to the model's positions)"
    ]
    from nmt.data.prepare import format_report

    assert "longer than max len 1" in format_report(meta)


def test_prepare_killed_inside_its_swap_gets_the_old_data_back(tmp_path):
    """A kill between prepare's two renames leaves OUT missing and the previous data under
    .OUT.old-*; the next `nmt prepare` puts it back first."""
    import signal

    from train_fixtures import write_corpus

    splits = write_corpus(tmp_path / "text", n_train=60, n_valid=5)
    out = tmp_path / "data"
    argv = [
        "prepare",
        "files",
        "--src",
        "en",
        "--tgt",
        "de",
        "--out",
        str(out),
        "--train",
        *map(str, splits["train"]),
        "--vocab-size",
        "60",
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    meta = (out / "meta.json").read_text()
    pid = os.fork()
    if pid == 0:  # the second prepare is killed once the old data is aside, before the new is renamed
        real_rename = os.rename

        def rename(src, dst):
            if Path(dst) == out:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_rename(src, dst)

        os.rename = rename
        try:
            main([*argv, "--force", "--seed", "2"])
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == -signal.SIGKILL
    assert not out.exists() and len(list(tmp_path.glob(".data.old-*/ckpt"))) == 1
    assert main(argv) == 2  # "already exists": the old data is back, not silently replaced
    assert (out / "meta.json").read_text() == meta
    assert not list(tmp_path.glob(".data.*"))
