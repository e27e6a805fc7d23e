"""nmt: the Transformer of "Attention Is All You Need", faithful and fast, for translation."""

__version__ = "0.1.0"


def __getattr__(name):
    """`from nmt import Translator` without importing torch on `import nmt`."""
    if name == "Translator":
        from .infer.translate import Translator

        return Translator
    raise AttributeError(f"module 'nmt' has no attribute {name!r}")
