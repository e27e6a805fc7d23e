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


def test_bidirectional_recipe_chooses_on_valid_then_translates_test_once(tmp_path):
    """Two 30-minute runs (the second right-to-left), a tune-alpha --rerank grid per beam, the
    valid-best (beam, alpha, weight) used once on test2016."""
    log = tmp_path / "calls.txt"
    fake = tmp_path / "nmt"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {log}\n'
                    'if [ "$1" = tune-alpha ]; then\n'
                    '  case "$*" in\n'
                    '    *"--beam 4 "*) printf "| 1 | 0.5 | 40.10 | 1 |\\nbest rerank weight: 0.5\\nbest alpha: 1\\n" ;;\n'
                    '    *) printf "| 0.6 | 0.4 | 40.50 | 1 |\\n| 1.4 | 0.3 | 39.00 | 1 |\\n'
                    'best rerank weight: 0.4\\nbest alpha: 0.6\\n" ;;\n'
                    '  esac\n'
                    'fi\n'
                    '[ "$1" = score ] && echo "BLEU = 40.00"\nexit 0\n')
    fake.chmod(0o755)
    out = subprocess.run(["sh", str(ROOT / "recipes/multi30k-en-de-bidirectional.sh"), str(tmp_path / "o")],
                         env={**os.environ, "NMT": str(fake)}, capture_output=True, text=True, check=True).stdout
    calls = log.read_text().splitlines()
    o = tmp_path / "o"
    trains = [c for c in calls if c.startswith("train ")]
    assert len(trains) == 2 and "--train.seed=1" in trains[0] and "right_to_left" not in trains[0]
    assert "--train.seed=2 --model.right_to_left=true" in trains[1] and f"--out {o}/r2l/run" in trains[1]
    tunes = [c for c in calls if c.startswith("tune-alpha")]
    assert tunes == [f"tune-alpha {o}/l2r/average --src {o}/l2r/data/valid.en.txt --ref {o}/l2r/data/valid.de.txt "
                     f"--beam {b} --alphas 0.6,1.0,1.4 --rerank {o}/r2l/average --rerank-weights 0.3,0.4,0.5,0.6,0.7 "
                     f"--out {o}/tune.beam{b}.json" for b in (4, 8)]
    assert calls[-2:] == [
        f"translate {o}/l2r/average -i {o}/l2r/data/test.en.txt -o {o}/test.hyp.de --beam 8 --alpha 0.6 "
        f"--rerank {o}/r2l/average --rerank-weight 0.4",
        f"score --ref {o}/l2r/data/test.de.txt {o}/test.hyp.de"]
    assert sum(c.startswith("translate") and "test.en.txt" in c and "--rerank" in c for c in calls) == 1
    assert "chosen on valid: beam 8, alpha 0.6, rerank weight 0.4 (valid BLEU 40.5)" in out
