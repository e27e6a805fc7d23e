#!/bin/sh
# LibreOffice help zh->en, 60 minutes on 2 CPU cores (`13a`, plus out-of-domain WMT newstest2018); see recipes/libreoffice.sh
# for what it does and its variables (MAX_TIME, TRAIN_ARGS, AVERAGE_LAST, EVAL_LINES).
#   sh recipes/libreoffice-zh-en.sh [OUT_DIR]
exec sh "$(dirname "$0")/libreoffice.sh" zh en "$@"
