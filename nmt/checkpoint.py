"""Checkpoints as safetensors + JSON (nothing that executes code on load), written atomically,
verified on load.

A checkpoint is a directory:
    model.safetensors        weights (a tied matrix stored once)
    config.json              {"model": ModelConfig, "train": TrainConfig, "data": meta.json of DATA_DIR}
    spm.model                the SentencePiece model: a checkpoint alone is enough to translate
    trainer_state.json       step, epoch, sampler position, RNG states, best score (training only)
    optimizer.safetensors    Adam moments (training only), optimizer.json its scalar state
    MANIFEST.json            sha256 and size of every other file, checked on load

Writes go to a temporary sibling directory, every file is fsync'ed, then the directory is renamed
into place, so a crash (even SIGKILL) mid-write leaves the previous checkpoints intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .config import ModelConfig, from_dict
from .model import Transformer

MANIFEST = "MANIFEST.json"


class CheckpointError(Exception):
    """A missing, truncated or altered checkpoint file; the message names it."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """state_dict with each shared tensor once (under its first name), contiguous, on CPU."""
    out, seen = {}, set()
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape, tensor.dtype)
        if tensor.numel() and key in seen:
            continue
        seen.add(key)
        out[name] = tensor.detach().cpu().contiguous()
    return out


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def save(directory: str | Path, *, model: torch.nn.Module, config: dict, spm_model: str | Path | None,
         trainer_state: dict | None = None, optimizer_tensors: dict[str, torch.Tensor] | None = None,
         optimizer_meta: dict | None = None) -> Path:
    """Atomically write a checkpoint directory at ``directory`` (replacing one already there)."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        save_file(unique_state_dict(model), str(tmp / "model.safetensors"), metadata={"format": "pt"})
        write_json(tmp / "config.json", config)
        if spm_model is not None:
            shutil.copyfile(spm_model, tmp / "spm.model")
        if trainer_state is not None:
            write_json(tmp / "trainer_state.json", trainer_state)
        if optimizer_tensors is not None:
            save_file({k: v.detach().cpu().contiguous() for k, v in optimizer_tensors.items()},
                      str(tmp / "optimizer.safetensors"))
            write_json(tmp / "optimizer.json", optimizer_meta or {})
        manifest = {}
        for f in sorted(tmp.iterdir()):
            manifest[f.name] = {"sha256": _sha256(f), "bytes": f.stat().st_size}
            with open(f, "rb+") as fh:
                os.fsync(fh.fileno())
        write_json(tmp / MANIFEST, manifest)
        with open(tmp / MANIFEST, "rb+") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        if directory.exists():  # replace: move the old one aside first, drop it after the rename
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.rename(directory, old / "ckpt")
            os.rename(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(tmp, directory)
        _fsync_dir(directory.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def verify(directory: str | Path) -> dict:
    """Check every file against MANIFEST.json; returns the manifest."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"{manifest_path}: missing (incomplete checkpoint?)")
    try:
        manifest = json.loads(manifest_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{manifest_path}: corrupt ({e})") from None
    for name, entry in manifest.items():
        path = directory / name
        if not path.exists():
            raise CheckpointError(f"{path}: missing file listed in {MANIFEST}")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(f"{path}: size {size} bytes, expected {entry['bytes']} (truncated or altered)")
        if _sha256(path) != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 mismatch (file altered or corrupt)")
    return manifest


def read_config(directory: str | Path) -> dict:
    return json.loads((Path(directory) / "config.json").read_text())


def load_state(directory: str | Path) -> dict[str, torch.Tensor]:
    return load_file(str(Path(directory) / "model.safetensors"))


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], *, source: str = "") -> None:
    """Load a de-duplicated state dict; names absent because they are tied must be tied."""
    missing, unexpected = model.load_state_dict(state, strict=False)
    full = model.state_dict()
    ptr_of = {}
    for name, tensor in full.items():
        ptr_of.setdefault((tensor.data_ptr(), tensor.shape), name)
    really_missing = [m for m in missing if ptr_of[(full[m].data_ptr(), full[m].shape)] not in state]
    if really_missing or unexpected:
        raise CheckpointError(f"{source}: weights do not match the model configuration "
                              f"(missing {really_missing[:3]}, unexpected {list(unexpected)[:3]})")


def load_model(directory: str | Path, *, device: str | torch.device = "cpu",
               check: bool = True) -> tuple[Transformer, dict]:
    """Load a checkpoint directory for inference: (model in eval mode, config.json contents)."""
    directory = resolve(directory)
    if check:
        verify(directory)
    config = read_config(directory)
    model_cfg = from_dict(ModelConfig, config["model"], section="model")
    model = Transformer(model_cfg)
    load_weights(model, load_state(directory), source=str(directory / "model.safetensors"))
    return model.to(device).eval(), config


def resolve(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its ``best``, else its latest checkpoint)."""
    path = Path(path)
    if (path / MANIFEST).exists() or (path / "model.safetensors").exists():
        return path
    ckpts = path / "checkpoints"
    if ckpts.is_dir():
        if (ckpts / "best" / MANIFEST).exists():
            return ckpts / "best"
        steps = list_step_checkpoints(path)
        if steps:
            return steps[-1]
    if (path / "checkpoint_avg" / MANIFEST).exists():
        return path / "checkpoint_avg"
    raise CheckpointError(f"{path}: not a checkpoint directory or a run directory with checkpoints")


def list_step_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete ``RUN_DIR/checkpoints/step_NNNNNNNN`` directories, oldest first."""
    ckpts = Path(run_dir) / "checkpoints"
    if not ckpts.is_dir():
        return []
    found = [p for p in ckpts.iterdir() if p.name.startswith("step_") and (p / MANIFEST).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))


def average(directories: list[str | Path]) -> dict[str, torch.Tensor]:
    """Section 6.1: the element-wise mean of the checkpoints' weights (float32 accumulation)."""
    if not directories:
        raise CheckpointError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    for d in directories:
        verify(d)
        state = load_state(d)
        if total and set(state) != set(total):
            raise CheckpointError(f"{d}: parameters differ from {directories[0]}")
        for k, v in state.items():
            total[k] = total[k] + v.double() if k in total else v.double()
    return {k: (v / len(directories)).float() for k, v in total.items()}
