"""Checkpoints as safetensors + JSON (nothing that executes code on load), written atomically,
verified on load.

A checkpoint is a directory:
    model.safetensors        weights (a tied matrix stored once)
    config.json              {"model": ModelConfig, "train": TrainConfig, "data": meta.json of DATA_DIR}
    spm.model                the SentencePiece model: a checkpoint alone is enough to translate
    target_spm.model         the target side's SentencePiece model, where it has its own (nmt.vocab)
    trainer_state.json       update, epoch, sampler position, RNG states, best score (training only)
    optimizer.safetensors    Adam moments (training only), optimizer.json its scalar state
    MANIFEST.json            sha256 and size of every other file, checked on load

Writes go to a temporary sibling directory, every file is fsync'ed, then the directory is renamed
into place, so a crash (even SIGKILL) mid-write leaves the previous checkpoints intact.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch.overrides import TorchFunctionMode

from .atomic import fsync_dir as _fsync_dir  # noqa: F401 (replace_dir: part of this API)
from .atomic import fsync_files, replace_dir, sha256_file
from .config import ConfigError, ModelConfig, from_dict
from .errors import UserError
from .model import Transformer
from .vocab import SPM, TARGET_SPM

MANIFEST = "MANIFEST.json"
REQUIRED = ("model.safetensors", "config.json")  # a manifest that lists neither verifies nothing
MAX_HEADER_BYTES = 100 << 20  # a safetensors JSON header larger than this is not ours


class CheckpointError(UserError):
    """A missing, truncated or altered checkpoint file; the message names it."""


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


def read_json(path: Path) -> dict:
    """A JSON object written by ``write_json`` (a run's config.json, trainer_state.json ...), or a
    CheckpointError naming the file."""
    try:
        data = json.loads(path.read_text())
    except OSError as e:
        raise CheckpointError(f"{path}: cannot read ({e.strerror or e})") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object")
    return data


def save(
    directory: str | Path,
    *,
    model: torch.nn.Module,
    config: dict,
    spm_model: str | Path | None,
    trainer_state: dict | None = None,
    optimizer_tensors: dict[str, torch.Tensor] | None = None,
    optimizer_meta: dict | None = None,
) -> Path:
    """Atomically write a checkpoint directory at ``directory`` (replacing one already there);
    ``spm_model``: the SentencePiece model (a DATA_DIR's or a checkpoint's spm.model), copied in with
    the ``target_spm.model`` beside it where there is one (nmt.vocab.TARGET_SPM)."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        _save_tensors(unique_state_dict(model), tmp / "model.safetensors", metadata={"format": "pt"})
        write_json(tmp / "config.json", config)
        if spm_model is not None:
            shutil.copyfile(spm_model, tmp / SPM)
            if (Path(spm_model).parent / TARGET_SPM).is_file():
                shutil.copyfile(Path(spm_model).parent / TARGET_SPM, tmp / TARGET_SPM)
        if trainer_state is not None:
            write_json(tmp / "trainer_state.json", trainer_state)
        if optimizer_tensors is not None:
            _save_tensors(
                {k: v.detach().cpu().contiguous() for k, v in optimizer_tensors.items()},
                tmp / "optimizer.safetensors",
            )
            write_json(tmp / "optimizer.json", optimizer_meta or {})
        manifest = {}
        for f in sorted(tmp.iterdir()):
            manifest[f.name] = {"sha256": sha256_file(f), "bytes": f.stat().st_size}
            with open(f, "rb+") as fh:
                os.fsync(fh.fileno())
        write_json(tmp / MANIFEST, manifest)
        with open(tmp / MANIFEST, "rb+") as fh:
            os.fsync(fh.fileno())
        _fsync_dir(tmp)
        replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _save_tensors(tensors: dict[str, torch.Tensor], path: Path, metadata: dict | None = None) -> None:
    """safetensors' save_file, with its I/O errors (a full disk) raised as OSError."""
    try:
        save_file(tensors, str(path), metadata=metadata)
    except OSError:
        raise
    except Exception as e:  # safetensors_rust.SafetensorError wraps the OS error in its message
        raise OSError(f"{path.name}: {e}") from e


def copy_checkpoint(source: Path, directory: Path) -> Path:
    """Copy checkpoint ``source`` to ``directory`` (e.g. ``best``), replacing it atomically: every
    copied file is fsync'ed before the rename, so a crash never leaves a renamed, unwritten copy."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        try:
            shutil.copytree(source, tmp, dirs_exist_ok=True)
        except shutil.Error as e:  # a list of (src, dst, why): report the first
            raise OSError(f"{e.args[0][0][1]}: {e.args[0][0][2]}") from None
        fsync_files(tmp)  # the copy is on disk before it replaces the previous one
        replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def remove_checkpoint(directory: Path) -> None:
    """Delete a checkpoint: rename it aside first (a hidden name, no longer listed as complete),
    so a kill during the deletion never leaves a partial directory that looks complete."""
    aside = directory.parent / f".{directory.name}.deleting-{os.getpid()}"
    os.rename(directory, aside)
    shutil.rmtree(aside, ignore_errors=True)


def clean_stale(folder: Path) -> list[str]:
    """Remove temporaries a killed writer left in ``folder`` (``.NAME.tmp-*``, ``.NAME.old-*``,
    ``.NAME.deleting-*``, the old ``.best.tmp``); returns their names. Call it only when no
    other process writes checkpoints into ``folder`` (the start of a run)."""
    removed = []
    if not folder.is_dir():
        return removed
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") and ".old-" in p.name:  # a replaced checkpoint set aside
            name = p.name[1:].split(".old-")[0]
            if not (folder / name).exists() and ((p / "ckpt" / MANIFEST).exists()):
                os.rename(p / "ckpt", folder / name)  # killed before its successor was in place
                removed.append(f"{p.name} (restored as {name})")
        if p.name.startswith(".") and (
            p.name == ".best.tmp" or any(tag in p.name for tag in (".tmp-", ".old-", ".deleting-"))
        ):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()
            removed.append(p.name)
    return removed


def verify(directory: str | Path) -> dict:
    """Check every file against MANIFEST.json; returns the manifest.

    The manifest must list at least the weights and the configuration, and every listed file
    must be a plain regular file (not a symlink, a device or a FIFO: reading those can hang)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"{directory}: no such checkpoint directory")
    manifest_path = directory / MANIFEST
    if not manifest_path.exists():
        raise CheckpointError(f"{manifest_path}: missing (incomplete checkpoint?)")
    _check_regular(manifest_path)
    try:
        manifest = json.loads(manifest_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{manifest_path}: corrupt ({e})") from None
    if not isinstance(manifest, dict) or not manifest:
        raise CheckpointError(
            f"{manifest_path}: empty or not a mapping of file names (incomplete checkpoint?)"
        )
    absent = [name for name in REQUIRED if name not in manifest]
    if absent:
        raise CheckpointError(
            f"{manifest_path}: does not list {absent[0]} (incomplete or altered checkpoint)"
        )
    for name, entry in manifest.items():
        if (
            not isinstance(name, str)
            or "/" in name
            or "\\" in name
            or name in (".", "..", MANIFEST)
            or not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not isinstance(entry.get("bytes"), int)
        ):
            raise CheckpointError(f"{manifest_path}: malformed entry {name!r}")
        path = directory / name
        if not path.exists() and not path.is_symlink():
            raise CheckpointError(f"{path}: missing file listed in {MANIFEST}")
        _check_regular(path)
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise CheckpointError(
                f"{path}: size {size} bytes, expected {entry['bytes']} (truncated or altered)"
            )
        if sha256_file(path) != entry["sha256"]:
            raise CheckpointError(f"{path}: sha256 mismatch (file altered or corrupt)")
    return manifest


def _check_regular(path: Path) -> None:
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        kind = (
            "a symlink"
            if stat.S_ISLNK(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else "not a regular file"
        )
        raise CheckpointError(f"{path}: {kind}; a checkpoint holds regular files only")


def read_config(directory: str | Path) -> dict:
    path = Path(directory) / "config.json"
    config = read_json(path)
    if not isinstance(config.get("model"), dict):
        raise CheckpointError(f"{path}: no model section")
    return config


def model_config(directory: str | Path, config: dict | None = None) -> ModelConfig:
    """The checkpoint's validated ModelConfig, refused before any allocation if its parameters
    would not fit in the memory available."""
    path = Path(directory) / "config.json"
    config = read_config(directory) if config is None else config
    try:
        cfg = from_dict(ModelConfig, config["model"], section="model")
    except ConfigError as e:
        raise CheckpointError(f"{path}: {e}") from None
    check_fits_in_memory(cfg, source=str(path))
    return cfg


class _NoInitialization(TorchFunctionMode):
    """torch.nn.init's functions leave their tensor as it is: a model on the meta device has shapes and
    nothing to initialize (on the meta device, nn.init.normal_ goes through torch._refs, whose first
    call imports torch._dynamo: over a second of every process that checks a model's size)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


def parameter_bytes(cfg: ModelConfig) -> int:
    """float32 bytes of the model's parameters and buffers, counted on the meta device."""
    with torch.device("meta"), _NoInitialization():
        model = Transformer(cfg)
    return sum(4 * p.numel() for p in model.parameters()) + sum(4 * b.numel() for b in model.buffers())


def available_memory() -> int:
    """Bytes of memory available now (MemAvailable on Linux; physical memory elsewhere)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_fits_in_memory(cfg: ModelConfig, *, source: str) -> None:
    need, have = parameter_bytes(cfg), available_memory()
    if need > have:
        raise CheckpointError(
            f"{source}: the model needs {need / 2**30:.1f} GiB for its parameters, "
            f"more than the {have / 2**30:.1f} GiB of memory available "
            f"(d_model={cfg.d_model}, {cfg.depth()}, d_ff={cfg.d_ff})"
        )


def check_safetensors(path: Path) -> None:
    """Check a safetensors file's header (size, JSON, dtypes, offsets within the file) before
    handing it to safetensors, so a hostile or foreign file is a CheckpointError naming it."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: not a safetensors file (shorter than its 8-byte header size)")
        n = struct.unpack("<Q", head)[0]
        if n > min(size - 8, MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path}: not a safetensors file (header claims {n} bytes, the file has {size})"
            )
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise CheckpointError(f"{path}: not a safetensors file (header is not JSON)") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: not a safetensors file (header is not a mapping)")
    data_bytes = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes
        ):
            raise CheckpointError(
                f"{path}: tensor {name!r} has data offsets {offsets} outside the "
                f"file's {data_bytes} data bytes"
            )


def load_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors; any problem is a CheckpointError naming the file."""
    path = Path(path)
    check_safetensors(path)
    try:
        return load_file(str(path))
    except Exception as e:  # safetensors_rust.SafetensorError, ...
        raise CheckpointError(f"{path}: cannot load ({e})") from None


def load_state(directory: str | Path) -> dict[str, torch.Tensor]:
    return load_tensors(Path(directory) / "model.safetensors")


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], *, source: str = "") -> None:
    """Load a de-duplicated state dict; names absent because they are tied must be tied.
    Shapes are checked and non-finite values (NaN, inf) refused, each naming the tensor."""
    full = model.state_dict()
    for name, tensor in state.items():
        if name in full and tuple(full[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"{source}: tensor {name} has shape {list(tensor.shape)}, the model "
                f"configuration expects {list(full[name].shape)}"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(
                f"{source}: tensor {name} holds NaN or infinite values "
                "(the training diverged or the file was altered)"
            )
    missing, unexpected = model.load_state_dict(state, strict=False)
    ptr_of = {}
    for name, tensor in full.items():
        ptr_of.setdefault((tensor.data_ptr(), tensor.shape), name)
    really_missing = [m for m in missing if ptr_of[(full[m].data_ptr(), full[m].shape)] not in state]
    if really_missing or unexpected:
        raise CheckpointError(
            f"{source}: weights do not match the model configuration "
            f"(missing {really_missing[:3]}, unexpected {list(unexpected)[:3]})"
        )


def load_model(
    directory: str | Path, *, device: str | torch.device = "cpu", check: bool = True
) -> tuple[Transformer, dict]:
    """Load a checkpoint directory for inference: (model in eval mode, config.json contents).
    The configuration is validated and sized before the model is allocated."""
    directory = resolve_checkpoint(directory)
    if check:
        verify(directory)
    config = read_config(directory)
    model_cfg = model_config(directory, config)
    state = load_state(directory)
    model = Transformer(model_cfg)
    load_weights(model, state, source=str(directory / "model.safetensors"))
    return model.to(device).eval(), config


def resolve_checkpoint(path: str | Path) -> Path:
    """A checkpoint directory, or a run directory (its ``best``, else its latest checkpoint)."""
    path = Path(path)
    if (path / MANIFEST).exists() or (path / "model.safetensors").exists():
        return path
    ckpts = path / "checkpoints"
    if ckpts.is_dir():
        if (ckpts / "best" / MANIFEST).exists():
            return ckpts / "best"
        aside = sorted(ckpts.glob(f".best.old-*/ckpt/{MANIFEST}"))  # killed while best was replaced
        if aside:
            return aside[-1].parent
        steps = list_step_checkpoints(path)
        if steps:
            return steps[-1]
    raise CheckpointError(f"{path}: not a checkpoint directory or a run directory with checkpoints")


def list_step_checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete ``RUN_DIR/checkpoints/step_NNNNNNNN`` directories, oldest first."""
    ckpts = Path(run_dir) / "checkpoints"
    if not ckpts.is_dir():
        return []
    found = [p for p in ckpts.iterdir() if p.name.startswith("step_") and (p / MANIFEST).exists()]
    return sorted(found, key=lambda p: int(p.name.split("_")[1]))
