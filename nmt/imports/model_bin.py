"""CTranslate2's ``model.bin`` read directly (no ctranslate2 needed): its variables as tensors.

The format (CTranslate2's python/ctranslate2/specs/model_spec.py ``_serialize`` writes it,
src/models/model.cc ``Model::load`` reads it), little-endian:

    uint32 binary_version
    (version >= 2) string spec_name, uint32 spec_revision
    uint32 n_variables, then each: string name, uint8 rank, uint32 dims[rank],
        (version >= 4) uint8 dtype id (float32, int8, int16, int32, float16, bfloat16), uint32 n_bytes
        (version < 4)  uint8 item size (4 float32, 2 int16, 1 int8), uint32 n_items
        the bytes
    (version >= 3) uint32 n_aliases, then each: string alias, string name of the variable
    string: uint16 length (with the trailing NUL), the UTF-8 bytes and NUL

Quantized weights (int8 per row, int16 per layer) are stored with ``NAME_scale`` and read back as
float32 (value / scale); float16 and bfloat16 as float32. A truncated or malformed file is an error
naming the file and the byte where it ends.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import torch

from .imported import ModelImportError

MAX_VERSION = 6  # the newest binary version this reader knows (CTranslate2 4.x writes 6)
DTYPES = (torch.float32, torch.int8, torch.int16, torch.int32, torch.float16, torch.bfloat16)
OLD_ITEM_SIZES = {4: torch.float32, 2: torch.int16, 1: torch.int8}


@dataclass
class ModelBin:
    """A model.bin: its binary version, spec name and revision, and every variable (aliases
    resolved, quantized weights as float32) by name; scalars as 0-d tensors."""

    version: int
    spec: str
    revision: int
    variables: dict[str, torch.Tensor]

    def scalar(self, *names: str, default=None):
        """The first of ``names`` present, as a Python number, else ``default``."""
        for name in names:
            if name in self.variables:
                return self.variables[name].item()
        return default


class _Reader:
    """Bytes read in order, every read checked against the end of the file."""

    def __init__(self, data: bytes, path: Path):
        self.data, self.path, self.pos = data, path, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ModelImportError(
                f"{self.path}: truncated or not a CTranslate2 model (reading {what} of {n} bytes at byte "
                f"{self.pos}, the file has {len(self.data)})"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def number(self, fmt: str, what: str) -> int:
        return struct.unpack("<" + fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.number("H", what), what)
        try:
            return raw.rstrip(b"\0").decode("utf-8")
        except UnicodeDecodeError:
            raise ModelImportError(f"{self.path}: {what} at byte {self.pos} is not UTF-8 text") from None


def _variable(r: _Reader, version: int) -> tuple[str, torch.Tensor]:
    name = r.string("a variable name")
    shape = [r.number("I", f"{name}'s shape") for _ in range(r.number("B", f"{name}'s rank"))]
    if version >= 4:
        type_id = r.number("B", f"{name}'s dtype")
        if type_id >= len(DTYPES):
            raise ModelImportError(f"{r.path}: {name} has an unknown dtype id {type_id}")
        dtype, n_bytes = DTYPES[type_id], r.number("I", f"{name}'s size")
    else:
        item = r.number("B", f"{name}'s item size")
        if item not in OLD_ITEM_SIZES:
            raise ModelImportError(f"{r.path}: {name} has an unknown item size {item}")
        dtype, n_bytes = OLD_ITEM_SIZES[item], r.number("I", f"{name}'s size") * item
    numel = 1
    for d in shape:
        numel *= d
    if numel * torch.empty(0, dtype=dtype).element_size() != n_bytes:
        raise ModelImportError(f"{r.path}: {name} has shape {shape} but {n_bytes} bytes")
    raw = bytearray(r.take(n_bytes, f"{name}'s values"))
    tensor = torch.frombuffer(raw, dtype=dtype) if n_bytes else torch.empty(0, dtype=dtype)
    return name, tensor.reshape(shape)


def dequantized(variables: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Weights as float32: int8/int16 divided by their ``_scale`` (per row or per layer), 16-bit
    floats widened; the scales dropped. Integer scalars (attributes) are kept as they are."""
    out = {}
    for name, t in variables.items():
        if name.endswith("_scale") and name[: -len("_scale")] in variables:
            continue
        if t.dtype in (torch.int8, torch.int16) and f"{name}_scale" in variables:
            scale = variables[f"{name}_scale"].float()
            t = t.float() / (scale[:, None] if scale.dim() == 1 else scale)
        elif t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        out[name] = t
    return out


def read_model_bin(path: str | Path) -> ModelBin:
    """The model.bin at ``path``; ModelImportError naming it when it is missing, truncated,
    malformed or of a newer binary version."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ModelImportError(f"{path}: cannot read ({e.strerror or e})") from None
    r = _Reader(data, path)
    version = r.number("I", "the binary version")
    if not 1 <= version <= MAX_VERSION:
        raise ModelImportError(
            f"{path}: binary version {version}; nmt reads CTranslate2 model.bin versions 1 to {MAX_VERSION}"
        )
    spec, revision = (
        (r.string("the spec name"), r.number("I", "the spec revision")) if version >= 2 else ("", 1)
    )
    variables = dict(_variable(r, version) for _ in range(r.number("I", "the variable count")))
    if version >= 3:
        for _ in range(r.number("I", "the alias count")):
            alias, name = r.string("an alias"), r.string("an aliased name")
            if name not in variables:
                raise ModelImportError(f"{path}: alias {alias} names no variable ({name})")
            variables[alias] = variables[name]
            if f"{name}_scale" in variables:  # a quantized weight's scale goes with it (as model.cc)
                variables[f"{alias}_scale"] = variables[f"{name}_scale"]
    if r.pos != len(data):
        raise ModelImportError(
            f"{path}: {len(data) - r.pos} bytes after the last variable (not a CTranslate2 model)"
        )
    return ModelBin(version, spec, revision, dequantized(variables))
