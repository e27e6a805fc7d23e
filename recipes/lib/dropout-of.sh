#!/bin/sh
# Print the model dropout of an nmt run or checkpoint directory (its config.json), so that the
# later runs of a multi-run recipe train at the dropout the first run's probe chose.
#   sh recipes/lib/dropout-of.sh runs/multi30k-en-de-ensemble/seed1/average   -> 0.1
set -eu
sed -n 's/^    "dropout": \([0-9.eE+-]*\),*$/\1/p' "$1/config.json" | head -n 1
