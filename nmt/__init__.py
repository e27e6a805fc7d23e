"""nmt: the Transformer of "Attention Is All You Need", faithful and fast, for translation."""

__version__ = "0.1.0"
