"""`nmt train ARGS`, calling glibc's malloc_trim(0) every TRIM_EVERY updates (0: never), for the
A/B in results/speedrun/README.md (does the training rate fall with the heap?):
    TRIM_EVERY=200 python benchmarks/malloc_trim_train.py train DATA --out OUT ...
Prints the time of each trim to stderr. glibc only (Linux).
"""

import ctypes
import os
import sys
import time

import nmt.train.trainer as trainer
from nmt.cli import main

every = int(os.environ.get("TRIM_EVERY", "0"))
libc = ctypes.CDLL("libc.so.6")
train_step = trainer.Trainer.train_step


def train_step_then_trim(self, *args, **kwargs):
    out = train_step(self, *args, **kwargs)
    if every and self.progress.update % every == 0:
        start = time.time()
        libc.malloc_trim(0)
        print(f"trim at {self.progress.update}: {time.time() - start:.3f} s", file=sys.stderr, flush=True)
    return out


trainer.Trainer.train_step = train_step_then_trim
sys.exit(main(sys.argv[1:]))
