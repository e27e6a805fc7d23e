#!/bin/sh
# `make demo`: prepare Multi30k en-de, train a small Transformer for 13 minutes (on the GPU when torch
# sees one, else on the CPU), average the last 5 checkpoints, calibrate its confidences on valid,
# translate test2016 (beam 4, alpha 0.6), show a few sentences next to their references, and print sacreBLEU. About 14 minutes on 2 cores,
# plus the install. PY: the Python that has torch (the Makefile gives .venv's).
set -eu
OUT=${1:-runs/demo}
NMT=${NMT:-nmt}
PY=${PY:-python3}
HERE=$(dirname "$0")
# the corpora: $NMT_DATA_DIR, else ../shared/data next to the checkout when it exists (as the
# Makefile does), else `nmt prepare` downloads them
if [ -z "${NMT_DATA_DIR:-}" ] && [ -d "$HERE/../../shared/data" ]; then
  NMT_DATA_DIR=$(cd "$HERE/../../shared/data" && pwd); export NMT_DATA_DIR
fi
# the device `nmt train` and `nmt translate` choose (nmt.train.distributed.resolve_device: cuda when
# available), as torch sees it
device=$("$PY" -c 'import torch
print(f"the GPU ({torch.cuda.get_device_name(0)})" if torch.cuda.is_available() else "the CPU")' 2>/dev/null) ||
  device="the GPU if torch sees one, else the CPU"
echo "nmt demo: Multi30k en->de, ~13 minutes of training on $device, then beam-search translation."
rm -rf "$OUT"
mkdir -p "$OUT"
$NMT prepare multi30k --src en --tgt de --out "$OUT/data"
$NMT train "$OUT/data" --out "$OUT/run" --config "$HERE/demo.yaml"
# the last 5 checkpoints (section 6.1); a slow or busy CPU may write fewer in 13 minutes: then all of them
LAST=$(find "$OUT/run/checkpoints" -maxdepth 1 -name 'step_*' 2>/dev/null | wc -l)
if [ "$LAST" -gt 5 ]; then LAST=5; fi
if [ "$LAST" -lt 5 ]; then
  echo "nmt demo: only $LAST checkpoints in 13 minutes (a slow or busy CPU): averaging those; expect a weaker model"
fi
$NMT average "$OUT/run" --last "$LAST" --out "$OUT/average"
# the confidences calibrated on the validation set (docs/translation.md: confidence.json)
$NMT calibrate "$OUT/average" --src "$OUT/data/valid.en.txt" --ref "$OUT/data/valid.de.txt"
$NMT translate "$OUT/average" -i "$OUT/data/test.en.txt" -o "$OUT/test.hyp.de" --beam 4 --alpha 0.6
echo
echo "== five test2016 sentences: source / nmt / reference"
for i in 1 2 3 4 5; do
  echo "src: $(sed -n "${i}p" "$OUT/data/test.en.txt")"
  echo "nmt: $(sed -n "${i}p" "$OUT/test.hyp.de")"
  echo "ref: $(sed -n "${i}p" "$OUT/data/test.de.txt")"
  echo
done
echo "== test2016 (1,000 sentences), averaged checkpoint, beam 4, alpha 0.6"
$NMT score --ref "$OUT/data/test.de.txt" "$OUT/test.hyp.de"
