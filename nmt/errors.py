"""The one base class of the errors a user can fix: `nmt` prints them as one line and exits 2.

Each layer keeps its own error (ConfigError, DataError, CheckpointError, TranslateError, ...), named
after what failed; all derive from ``UserError``, which nmt.cli.main catches. Anything else that
escapes a command is a bug in nmt ("internal error", exit 1).
"""


class UserError(Exception):
    """A bad input, option, file or environment, described in a message that names it."""
