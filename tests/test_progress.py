"""nmt.progress: a tqdm bar on a terminal; plain lines now and then in a file or a pipe."""

import io

from nmt.progress import PlainProgress, progress


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_file_gets_plain_lines_at_most_every_interval_never_carriage_returns():
    out, clock = io.StringIO(), Clock()
    bar = PlainProgress(total=1000, unit="sent", desc="translate", file=out, every=30.0, clock=clock)
    for i in range(1000):  # 100 s of updates, one every 0.1 s
        clock.t += 0.1
        bar.update(1)
    bar.set_postfix_str("chunk 2/2")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 4  # at 30, 60, 90 s and the close
    assert lines[0] == "translate: 300/1,000 sent (30%), 30 s"
    assert lines[-1] == "translate: 1,000/1,000 sent (100%), 100 s, chunk 2/2"


def test_progress_is_a_bar_only_on_a_terminal():
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    pipe, terminal = io.StringIO(), Terminal()
    for stream in (pipe, terminal):
        bar = progress(total=50, unit="sent", desc="translate", file=stream)
        for _ in range(50):
            bar.update(1)
        bar.close()
    assert "\r" not in pipe.getvalue() and pipe.getvalue() == "translate: 50/50 sent (100%), 0 s\n"
    assert "\r" in terminal.getvalue()  # tqdm's frames
    quiet = io.StringIO()
    progress(total=5, unit="sent", file=quiet, disable=True).close()
    assert quiet.getvalue() == ""


def test_nmt_translate_into_a_log_file_writes_its_progress_as_one_plain_line(
    tiny_checkpoint, tmp_path, capsys
):
    """stderr captured (not a terminal, as `make recipe-finetune 2> log`): the bar is one line at
    the end, not tqdm's carriage-return frames (one per batch)."""
    from nmt.cli import main

    src = tmp_path / "in.txt"
    src.write_text("".join(f"der hund {i}\n" for i in range(12)), encoding="utf-8")
    argv = ["translate", str(tiny_checkpoint), "-i", str(src), "-o", str(tmp_path / "out.txt")]
    assert main([*argv, "--beam", "1", "--max-len-a", "0", "--max-len-b", "3", "--batch-tokens", "8"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "translate: 12/12 sent (100%)" in err
