"""The recipe scripts' plumbing (recipes/*.sh), with a fake `nmt` that records its calls."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ensemble_test_tunes_alpha_on_valid_then_translates_test_once(tmp_path):
    log = tmp_path / "calls.txt"
    fake = tmp_path / "nmt"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                    '[ "$1" = tune-alpha ] && echo "best alpha: 1.2"\n'
                    '[ "$1" = score ] && echo "BLEU = 40.00"\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(["sh", str(ROOT / "recipes/ensemble-test.sh"), str(tmp_path), "/D", "two seeds",
                          "runs/a", "runs/b"], env={**os.environ, "NMT": str(fake)},
                         capture_output=True, text=True, check=True).stdout
    calls = log.read_text().splitlines()
    assert calls == [
        f"tune-alpha runs/a runs/b --src /D/valid.en.txt --ref /D/valid.de.txt --out {tmp_path}/alpha.json",
        f"translate runs/a runs/b -i /D/test.en.txt -o {tmp_path}/test.hyp.de --beam 4 --alpha 1.2",
        f"score --ref /D/test.de.txt {tmp_path}/test.hyp.de"]
    assert "== test2016, two seeds, beam 4, alpha 1.2 (chosen on valid)" in out
    assert (tmp_path / "test.score.txt").read_text() == "BLEU = 40.00\n"
