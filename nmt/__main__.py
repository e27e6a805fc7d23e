"""`python -m nmt ...` (and `torchrun -m nmt train ...`)."""

import sys

from .cli import main

sys.exit(main())
