"""Tests only: `nmt` with one rank slowed down; tests/test_distributed.py starts it under torchrun.

NMT_TEST_DELAY=RANK:SECONDS[:PER_UPDATE]: rank RANK sleeps SECONDS before training starts (so its clock
starts late) and PER_UPDATE seconds before each update. Empty: plain `nmt`."""

import os
import sys
import time

from nmt.cli import main
from nmt.train import trainer

spec = os.environ.get("NMT_TEST_DELAY", "")
if spec:
    rank, first, *each = spec.split(":")
    if int(rank) == int(os.environ.get("RANK", "0")):
        real_run, real_step = trainer.Trainer.run, trainer.Trainer.train_step

        def slow_run(self, *args, **kwargs):
            time.sleep(float(first))
            return real_run(self, *args, **kwargs)

        def slow_step(self, *args, **kwargs):
            time.sleep(float(each[0]))
            return real_step(self, *args, **kwargs)

        trainer.Trainer.run = slow_run
        if each:
            trainer.Trainer.train_step = slow_step

sys.exit(main(sys.argv[1:]))
