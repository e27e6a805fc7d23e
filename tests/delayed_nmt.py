"""Tests only: `nmt` with one rank slowed down or paused; tests/test_distributed.py starts it under torchrun.

NMT_TEST_DELAY=RANK:SECONDS[:PER_UPDATE]: rank RANK sleeps SECONDS before training starts (so its clock
starts late) and PER_UPDATE seconds before each update. Empty: plain `nmt`.

NMT_TEST_PAUSE=RANK:UPDATE:PATH:UNTIL: rank RANK, just before update UPDATE (after its micro-batches and
their token count were exchanged), creates the file PATH (which may hold ":") and waits: UNTIL=signal
until a stop signal reached it (then it says so on stdout and goes on with that update), UNTIL=kill until
it is killed. The test that sent the signal or the kill thus knows the update it landed in, whatever the
load; the wait ends after 300 s (the test then fails on the step it expects)."""

import os
import sys
import time
from pathlib import Path

from nmt.cli import main
from nmt.train import trainer

RANK = int(os.environ.get("RANK", "0"))

spec = os.environ.get("NMT_TEST_DELAY", "")
if spec:
    rank, first, *each = spec.split(":")
    if int(rank) == RANK:
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

pause = os.environ.get("NMT_TEST_PAUSE", "")
if pause:
    rank, update, rest = pause.split(":", 2)
    path, until = rest.rsplit(":", 1)  # PATH may hold ":" itself
    if int(rank) == RANK:
        step_before_pause = trainer.Trainer.train_step

        def paused_step(self, *args, **kwargs):
            if self.progress.update + 1 == int(update):
                Path(path).touch()
                deadline = time.time() + 300
                while time.time() < deadline and not (until == "signal" and self.preemption.requested):
                    time.sleep(0.01)
                if self.preemption.requested:
                    print(
                        f"rank {RANK}: {self.preemption.signal_name} received before update {update}",
                        flush=True,
                    )
            return step_before_pause(self, *args, **kwargs)

        trainer.Trainer.train_step = paused_step

sys.exit(main(sys.argv[1:]))
