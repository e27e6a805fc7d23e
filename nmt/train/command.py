"""`nmt train` from the command line: the run's configuration from a preset, a config file and
--model.* / --train.* overrides, the checks of --resume (a resumed run keeps its model), then the
loop of `trainer`."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .. import checkpoint as ckpt
from ..config import (
    PRESETS,
    ConfigError,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    preset,
    to_dict,
    train_preset,
)
from ..config_file import apply_config, load_config_file
from ..data.dataset import load_meta
from . import distributed
from .finetune import InitFrom, check_vocabulary, init_model_config, open_init, vocabulary_difference
from .guard_valid import GuardSet, open_guard
from .replay import Replay, open_replay
from .trainer import Start, Trainer, TrainError


def build_configs(
    data_dir: Path, *, preset_name: str | None, config_file: str | None, overrides: dict
) -> tuple[ModelConfig, TrainConfig, dict]:
    meta = load_meta(data_dir)  # raises a clear error when DATA_DIR is not prepared
    vocab = int(meta["vocab_size"])
    raw = load_config_file(config_file) if config_file else {"model": {}, "train": {}}
    name = preset_name or raw.get("preset") or "base"
    model_cfg = preset(name, vocab)
    train_cfg = train_preset(name)
    unknown = sorted(set(overrides) - {"model", "train"})
    if unknown:
        raise ConfigError(f"--{unknown[0]}.*: unknown section; overrides are --model.* and --train.*")
    model_cfg = apply_config(
        model_cfg,
        section="model",
        path=config_file,
        values=raw["model"],
        overrides=overrides.get("model", {}),
    )
    train_cfg = apply_config(
        train_cfg,
        section="train",
        path=config_file,
        values=raw["train"],
        overrides=overrides.get("train", {}),
    )
    if model_cfg.src_vocab_size != vocab or model_cfg.tgt_vocab_size != vocab:
        raise ConfigError(
            f"model.src_vocab_size/tgt_vocab_size = {model_cfg.src_vocab_size}/"
            f"{model_cfg.tgt_vocab_size} do not match the vocabulary of {data_dir} "
            f"({vocab} pieces, meta.json)"
        )
    return model_cfg, train_cfg, meta


def add_train_args(parser) -> None:
    parser.add_argument("data_dir", help="a directory written by `nmt prepare`")
    parser.add_argument("--out", required=True, help="run directory (checkpoints, logs, metrics.jsonl)")
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        help="model and training defaults (default: base, or the config file's preset:)",
    )
    parser.add_argument("--config", help="YAML/JSON with model: and train: sections (and optional preset:)")
    parser.add_argument(
        "--resume",
        nargs="?",
        const="strict",
        choices=["strict", "auto"],
        default=None,
        help="continue RUN_DIR from its last checkpoint; `--resume auto`: continue if RUN_DIR "
        "has one, else start fresh (for preemptible jobs: re-run the same command)",
    )
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")
    parser.add_argument(
        "--init",
        metavar="CHECKPOINT",
        help="fine-tune: start from this checkpoint's weights (or a run directory's best); "
        "its model configuration is kept (only the dropouts may change), the optimizer, "
        "schedule and step counter start anew; DATA must have its vocabulary "
        "(nmt prepare ... --spm-model CHECKPOINT)",
    )
    parser.add_argument(
        "--init-optimizer",
        action="store_true",
        help="with --init: also keep the checkpoint's Adam state (a step checkpoint's)",
    )
    parser.add_argument(
        "--replay",
        metavar="DIR",
        help="with --init: replay general data beside DATA so as not to forget it: a prepared "
        "directory with DATA's vocabulary (e.g. the data the checkpoint was trained on), whose train "
        "pairs are drawn anew each epoch",
    )
    parser.add_argument(
        "--replay-share",
        type=float,
        default=0.2,
        metavar="S",
        help="with --replay: the share of each epoch's target tokens that are replayed (default 0.2)",
    )
    parser.add_argument(
        "--guard-valid",
        nargs="+",
        metavar="DIR_OR_FILES",
        help="with --init: a second validation set of what the model knew (a prepared DIR's valid "
        "split, or SRC TGT text files), scored at every validation and at update 0; the best checkpoint "
        "is the best valid one whose BLEU on it stays within --guard-bleu-drop of update 0's",
    )
    parser.add_argument(
        "--guard-bleu-drop",
        type=float,
        default=1.0,
        metavar="B",
        help="with --guard-valid: the BLEU points the guard set may lose (default 1.0)",
    )


def init_configs(
    data_dir: Path, init: InitFrom, *, preset_name: str | None, config_file: str | None, overrides: dict
) -> tuple[ModelConfig, TrainConfig, dict]:
    """A fine-tuning run's configuration: the model of the checkpoint (only its dropouts may change),
    the training of --preset / --config if given, else the checkpoint's own, then --train.*."""
    unknown = sorted(set(overrides) - {"model", "train"})
    if unknown:
        raise ConfigError(f"--{unknown[0]}.*: unknown section; overrides are --model.* and --train.*")
    raw = load_config_file(config_file) if config_file else {}
    model_cfg = init_model_config(init, overrides.get("model", {}), config_model=raw.get("model"))
    check_vocabulary(data_dir, init)
    meta = load_meta(data_dir)
    if preset_name or config_file:
        train_cfg = build_configs(data_dir, preset_name=preset_name, config_file=config_file, overrides={})[1]
    else:
        saved = ckpt.read_config(init.directory).get("train")
        train_cfg = from_dict(TrainConfig, saved, section="train") if saved else train_preset("base")
    train_cfg = apply_overrides(train_cfg, overrides.get("train", {}), section="train")
    return model_cfg, train_cfg, meta


def run_train(args, overrides: dict) -> int:
    data_dir, run_dir = Path(args.data_dir), Path(args.out)
    if args.init_optimizer and not args.init:
        raise ConfigError("--init-optimizer: only with --init CHECKPOINT")
    init = open_init(args.init, keep_optimizer=args.init_optimizer) if args.init else None
    auto = args.resume == "auto"
    # --resume auto with nothing to resume is a fresh start (a start killed before its first checkpoint
    # begins again: see run_checkpoints.start_or_resume); --resume (strict) needs a run
    resume = bool(args.resume) and not (auto and not ckpt.list_step_checkpoints(run_dir))
    if resume and not auto and not (run_dir / "config.json").exists():
        raise TrainError(
            f"--resume: {run_dir} has no complete checkpoint to resume from (no run there; "
            "--resume auto starts one)"
        )
    if resume and not auto and (args.preset or args.config):
        raise ConfigError(
            f"--resume continues {run_dir} with its saved configuration ({run_dir}/config.json); "
            f"--{'preset' if args.preset else 'config'} cannot change it (--train.* can)"
        )
    if resume and (run_dir / "config.json").exists():
        model_cfg, train_cfg, meta = resume_configs(data_dir, run_dir, args, overrides, init=init, auto=auto)
    elif init is not None:
        model_cfg, train_cfg, meta = init_configs(
            data_dir, init, preset_name=args.preset, config_file=args.config, overrides=overrides
        )
    else:
        model_cfg, train_cfg, meta = build_configs(
            data_dir, preset_name=args.preset, config_file=args.config, overrides=overrides
        )
    saved = ckpt.read_json(run_dir / "config.json") if resume and (run_dir / "config.json").exists() else None
    replay, guard = adaptation(args, data_dir, init=init, saved=saved)
    trainer = None
    try:
        trainer = Trainer(
            data_dir,
            run_dir,
            model_cfg,
            train_cfg,
            meta,
            Start(resume=resume, fall_back=auto, init=None if resume else init, replay=replay, guard=guard),
            device=args.device,
        )
        trainer.run()
    except distributed.DistributedError as e:
        raise TrainError(str(e)) from None
    except torch.OutOfMemoryError as e:
        raise TrainError(
            out_of_memory_message(e, train_cfg, update=trainer.progress.update if trainer else None)
        ) from None
    except KeyboardInterrupt:  # Ctrl-C before the loop, or a second one: the first one checkpoints
        print(
            "nmt train: interrupted (Ctrl-C) and stopped at once; the checkpoints written are intact "
            "(continue with --resume auto)",
            file=sys.stderr,
        )
        return 130
    return exit_status(trainer)


def adaptation(
    args, data_dir: Path, *, init: InitFrom | None, saved: dict | None
) -> tuple[Replay | None, GuardSet | None]:
    """What a fine-tuning run replays and guards: --replay / --guard-valid (with --init), or a resumed
    run's own (``saved``: its config.json; the options, if given, must say the same)."""
    replay_dir, guard_given = getattr(args, "replay", None), getattr(args, "guard_valid", None)
    if saved is None:
        if init is None and (replay_dir or guard_given):
            name = "replay" if replay_dir else "guard-valid"
            raise ConfigError(f"--{name}: a fine-tuning option, only with --init CHECKPOINT")
        replay = open_replay(replay_dir, args.replay_share, data_dir=data_dir) if replay_dir else None
        guard = (
            open_guard(guard_given, bleu_drop=args.guard_bleu_drop, data_dir=data_dir)
            if guard_given
            else None
        )
        return replay, guard
    replay_record, guard_record = saved.get("replay"), saved.get("guard")
    asked = {
        "replay": replay_dir and {"path": str(Path(replay_dir).resolve()), "share": args.replay_share},
        "guard-valid": guard_given and {"valid": [str(Path(p).resolve()) for p in guard_given]},
    }
    for name, record in (("replay", replay_record), ("guard-valid", guard_record)):
        if asked[name] and (record is None or any(record.get(k) != v for k, v in asked[name].items())):
            raise ConfigError(
                f"--{name}: the run being resumed has {record or 'none'} ({args.out}/config.json); "
                "resume it with the same option, or without it"
            )
    replay = guard = None
    if replay_record:
        replay = open_replay(replay_record["path"], replay_record["share"], data_dir=data_dir)
    if guard_record:
        guard = open_guard(guard_record["valid"], bleu_drop=guard_record["bleu_drop"], data_dir=data_dir)
    return replay, guard


def out_of_memory_message(error: Exception, cfg: TrainConfig, *, update: int | None) -> str:
    """One line for an allocation that failed (CUDA out of memory): where, and the setting to lower."""
    what = str(error).strip().split(". ")[0] or type(error).__name__  # 'CUDA out of memory'
    where = f"at update {update + 1}" if update is not None else "while setting up the model"
    return (
        f"out of memory {where} ({what}): train.max_tokens={cfg.max_tokens} padded tokens per micro-batch "
        f"do not fit; rerun with a smaller --train.max_tokens (e.g. {max(cfg.max_tokens // 2, 1)}: the "
        f"update keeps ~{cfg.update_tokens} target tokens by accumulation); the checkpoints written are "
        "intact (docs/gpu.md)"
    )


def resume_configs(
    data_dir: Path, run_dir: Path, args, overrides: dict, *, init: InitFrom | None, auto: bool
) -> tuple[ModelConfig, TrainConfig, dict]:
    """A resumed run's configuration: its config.json, --train.* applied. Its model cannot change:
    --model.*, the --preset / --config of a scheduler re-running the first command (--resume auto)
    and the model of --init are checked against it."""
    unknown = sorted(set(overrides) - {"model", "train"})
    if unknown:
        raise ConfigError(f"--{unknown[0]}.*: unknown section; overrides are --model.* and --train.*")
    saved = ckpt.read_json(run_dir / "config.json")
    try:
        model_cfg = from_dict(ModelConfig, saved["model"], section="model")
    except (KeyError, TypeError, ConfigError) as e:
        raise TrainError(f"{run_dir}/config.json: not a run configuration ({e})") from None
    started = saved.get("init") or {}
    if init is not None and started.get("sha256") != init.sha256:
        raise ConfigError(
            f"--init {args.init}: the run being resumed started from "
            f"{started.get('path', 'no checkpoint (a run from scratch)')} "
            f"({run_dir}/config.json); resume it without --init, or choose another --out"
        )
    if init is not None:  # a fine-tuning run re-run by its scheduler: the checkpoint's model
        asked = init_model_config(init, overrides.get("model", {}))
    elif auto and (args.preset or args.config):  # the scheduler re-runs the first command: it must match
        asked = build_configs(
            data_dir, preset_name=args.preset, config_file=args.config, overrides=overrides
        )[0]
    else:
        asked = apply_overrides(model_cfg, overrides.get("model", {}), section="model")
    changed = [k for k, v in to_dict(asked).items() if v != getattr(model_cfg, k)]
    if changed:
        raise ConfigError(
            f"--model.{changed[0]}={getattr(asked, changed[0])!r}: the run being resumed has "
            f"model.{changed[0]}={getattr(model_cfg, changed[0])!r} ({run_dir}/config.json); "
            "the model of a run cannot change"
        )
    train_cfg = apply_overrides(
        from_dict(TrainConfig, saved["train"], section="train"),
        overrides.get("train", {}),
        section="train",
    )
    meta = load_meta(data_dir)
    if int(meta["vocab_size"]) != model_cfg.tgt_vocab_size:
        raise ConfigError(
            f"{data_dir}: vocabulary {meta['vocab_size']} does not match the run's model "
            f"({model_cfg.tgt_vocab_size})"
        )
    check_run_vocabulary(data_dir, run_dir, trained_on=saved.get("data_dir", "?"))
    return model_cfg, train_cfg, meta


def check_run_vocabulary(data_dir: Path, run_dir: Path, *, trained_on: str) -> None:
    """The data of a resumed run must have its vocabulary (that of its newest checkpoint whose spm.model
    reads), piece for piece: the weights' ids mean those pieces."""
    for directory in reversed(ckpt.list_step_checkpoints(run_dir)):
        try:
            difference = vocabulary_difference(data_dir, directory)
        except ValueError:  # an unreadable spm.model: the data's is refused by training, a damaged
            continue  # checkpoint's by loading it
        if difference:
            raise ConfigError(
                f"{difference} (the vocabulary of the run being resumed): resume with the data the run "
                f"was trained on ({trained_on}), or prepare this data with the run's vocabulary "
                f"(nmt prepare ... --spm-model {directory})"
            )
        return


def exit_status(trainer: Trainer) -> int:
    """Leave the job's process group (no rank tears down while another works); 130 when Ctrl-C stopped
    the run (its checkpoint is written, as a shell expects), else 0."""
    status = 130 if trainer.stopped_by == "SIGINT" else 0
    if dist.is_initialized():
        trainer.coll.barrier(what="the barrier at the end of training")
        dist.destroy_process_group()
        if trainer.world > 1:
            # The job is complete (checkpoints written, logs closed). Under load, gloo's background
            # threads can still abort a rank at interpreter teardown (std::terminate, SIGABRT), which
            # torchrun reports as a failed job; leave without running C++ static destructors.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    return status


# ----------------------------------------------------------------------------- nmt average
def add_average_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory with checkpoints/step_*")
    parser.add_argument(
        "--last", type=int, default=5, help="how many of the last checkpoints (paper: 5 base, 20 big)"
    )
    parser.add_argument(
        "--out", required=True, help="where to write the averaged checkpoint (a new directory)"
    )
    parser.add_argument("--force", action="store_true", help="replace --out if it is an existing checkpoint")


def run_average(args: argparse.Namespace, overrides: dict) -> int:
    from .average import average_run

    chosen = average_run(args.run_dir, last=args.last, out=args.out, force=args.force)
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {args.out}")
    return 0
