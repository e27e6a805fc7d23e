"""Helpers of recipes/finetune-libreoffice-en-de.sh (run with the venv's python):

python recipes/lib/adaptation.py tmx SRC.gz TGT.gz OUT.tmx SRC_LANG TGT_LANG
    tagged segments (LibreOffice help's *.tagged.* files: HTML fragments) written as one TMX 1.4
    file, their tags as bpt/ept/ph (nmt.data.memories.write_tmx)
python recipes/lib/adaptation.py scores OUT_DIR [KEY=VALUE ...]
    OUT_DIR/scores.json from the `nmt score --format json` files OUT_DIR/{TEST}.{MODEL}.json
    (TEST libreoffice or multi30k; MODEL start, adapted, guarded, scratch): every score, the
    settings given as KEY=VALUE, and the goal (the guarded run keeps >= 90% of the adapted run's
    LibreOffice gain over the start while losing <= 1.0 Multi30k BLEU)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

GOAL_GAIN_KEPT = 0.9  # the share of plain fine-tuning's in-domain gain the guarded run keeps
GOAL_MULTI30K_LOSS = 1.0  # the Multi30k BLEU the guarded run may lose


def tmx(src: str, tgt: str, out: str, src_lang: str, tgt_lang: str) -> None:
    from nmt.data.lines import read_pairs
    from nmt.data.memories import write_tmx

    n = write_tmx(list(read_pairs(src, tgt)), out, src=src_lang, tgt=tgt_lang)
    print(f"wrote {out}: {n} units")


def goal(scores: dict) -> dict | None:
    """The guarded run against the adapted one and the start, when all three were scored."""
    try:
        start, adapted, guarded = (scores[m] for m in ("start", "adapted", "guarded"))
        gain = adapted["libreoffice"]["bleu"] - start["libreoffice"]["bleu"]
        kept = (guarded["libreoffice"]["bleu"] - start["libreoffice"]["bleu"]) / gain if gain else None
        lost = start["multi30k"]["bleu"] - guarded["multi30k"]["bleu"]
    except KeyError:
        return None
    return {
        "libreoffice_gain_kept": kept,
        "multi30k_bleu_lost": lost,
        "met": kept is not None and kept >= GOAL_GAIN_KEPT and lost <= GOAL_MULTI30K_LOSS,
        "goal": f">= {GOAL_GAIN_KEPT:.0%} of the adapted run's LibreOffice gain, <= {GOAL_MULTI30K_LOSS} "
        "Multi30k BLEU lost",
    }


def scores(out: str, *settings: str) -> dict:
    folder = Path(out)
    table: dict[str, dict] = {}
    for path in sorted(folder.glob("*.json")):
        test, _, model = path.stem.partition(".")
        if test in ("libreoffice", "multi30k") and model:
            s = json.loads(path.read_text())
            table.setdefault(model, {})[test] = {"bleu": s["bleu"], "chrf": s["chrf"]}
    result = {
        "settings": dict(s.split("=", 1) for s in settings),
        "scores": table,
        "goal": goal(table),
    }
    (folder / "scores.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "tmx":
        tmx(*args)
    elif command == "scores":
        print(json.dumps(scores(*args)["goal"], indent=2))
    else:
        sys.exit(f"unknown command {command!r}: tmx or scores")
