"""nmt.errors.UserError: the one base of the errors a user can fix, which `nmt` prints as one line
(exit 2); anything else is an internal error (exit 1)."""

from __future__ import annotations

import pytest

from nmt import cli
from nmt.errors import UserError


def test_every_layers_user_error_is_a_user_error():
    from nmt.checkpoint import CheckpointError
    from nmt.config import ConfigError
    from nmt.data.download import DataError
    from nmt.export.ctranslate2 import ExportError
    from nmt.infer.plot_attention import PlotAttentionError
    from nmt.infer.results import ConstraintsError, TranslateError
    from nmt.infer.shortlist import ShortlistError
    from nmt.metrics import ScoreError
    from nmt.serve.command import ServeError
    from nmt.train.average import AverageError
    from nmt.train.trainer import TrainError

    errors = (CheckpointError, ConfigError, DataError, ExportError, PlotAttentionError, TranslateError)
    errors += (ConstraintsError, ShortlistError, ScoreError, ServeError, AverageError, TrainError)
    assert all(issubclass(e, UserError) for e in errors)
    assert issubclass(ConfigError, ValueError)  # still caught as a ValueError by the API's callers


class NewLayerError(UserError):
    """An error of a layer cli.main has never heard of."""


@pytest.mark.parametrize(
    "error, status, line",
    [
        (
            NewLayerError("bad.txt: line 3: not a number"),
            2,
            "nmt score: error: bad.txt: line 3: not a number",
        ),
        (RuntimeError("oops"), 1, "nmt score: internal error: RuntimeError: oops"),
    ],
)
def test_main_prints_a_user_error_as_one_line_and_exits_2(monkeypatch, capsys, error, status, line):
    def fail(args, overrides):
        raise error

    monkeypatch.setattr(cli, "run_score", fail)
    assert cli.main(["score", "--ref", "r.txt", "h.txt"]) == status
    err = capsys.readouterr().err
    assert err.startswith(line) and "Traceback" not in err
