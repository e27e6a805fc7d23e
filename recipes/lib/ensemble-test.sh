#!/bin/sh
# The end of the 60-minute recipes: an ensemble's length penalty chosen on valid (`nmt tune-alpha`,
# as the paper chose its 0.6 on its development set, 6.1), then test2016 translated once with it.
#   sh recipes/lib/ensemble-test.sh OUT_DIR DATA_DIR "LABEL" MODEL...
# Writes OUT_DIR/alpha.{json,txt}, test.hyp.de, test.score.txt. DATA_DIR: an `nmt prepare` output
# with valid/test text (valid.en.txt ...). Uses `nmt` from PATH, or set NMT="python -m nmt".
set -eu
OUT=$1; data=$2; label=$3; shift 3
NMT=${NMT:-nmt}
$NMT tune-alpha "$@" --src "$data/valid.en.txt" --ref "$data/valid.de.txt" --out "$OUT/alpha.json" \
  | tee "$OUT/alpha.txt"
ALPHA=$(sed -n 's/^best alpha: //p' "$OUT/alpha.txt")
$NMT translate "$@" -i "$data/test.en.txt" -o "$OUT/test.hyp.de" --beam 4 --alpha "$ALPHA"
echo "== test2016, $label, beam 4, alpha $ALPHA (chosen on valid)"
$NMT score --ref "$data/test.de.txt" "$OUT/test.hyp.de" | tee "$OUT/test.score.txt"
