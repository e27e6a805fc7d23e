#!/bin/sh
# LibreOffice help en->zh, 60 minutes on 2 CPU cores (sacreBLEU `zh` tokenizer); see recipes/libreoffice.sh
# for what it does and its variables (MAX_TIME, TRAIN_ARGS, AVERAGE_LAST, EVAL_LINES).
#   sh recipes/libreoffice-en-zh.sh [OUT_DIR]
exec sh "$(dirname "$0")/libreoffice.sh" en zh "$@"
