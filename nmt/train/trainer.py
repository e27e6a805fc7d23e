"""`nmt train`: the paper's training (section 5) in one straight loop.

Per optimizer step: take ``accum`` micro-batches (each <= max_tokens padded tokens per side) so that
about ``update_tokens`` target tokens are seen (5.1), count the target tokens of the whole update
across ranks, backpropagate the label-smoothed loss sum divided by that count (5.4), set the
learning rate of eq. 3 (5.3), Adam step, log, validate, checkpoint.

Run under ``torchrun --nproc_per_node=K -m nmt train ...`` for DistributedDataParallel (gloo on CPU,
nccl on CUDA); rank 0 writes checkpoints and logs. Every stop/save/validate decision is taken once per
update for the whole job (`distributed.py`); SIGTERM (exit 0) and Ctrl-C (exit 130) checkpoint at the
next update, or at once during validation. RUN_DIR has one owner (`run_dir.RunLock`); a crash at any
point loses no checkpoint and no best model (`validate_and_keep_best`, `run_dir.mend_best`); a log that
cannot be written (a full disk) stops the run with a checkpoint that holds the unwritten lines.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .. import checkpoint as ckpt
from ..allocator import keep_freed_memory
from ..atomic import write_text
from ..config import ConfigError, ModelConfig, TrainConfig, to_dict
from ..data.batching import Batch, TokenBatchSampler, collate
from ..data.prepare import ParallelDataset
from ..model import Transformer
from ..precision import autocast, resolve_precision
from ..vocab import PAD, UNK
from . import distributed
from . import validate as validation
from .finetune import InitFrom
from .loss import fused_label_smoothed_nll_loss
from .optim import build_adam, inverse_sqrt_lr, linear_decay, set_lr
from .run_dir import (
    RunDirError,
    RunLock,
    check_free_space,
    mend_best,
    set_aside,
    trim_metrics,
    write_unwritten,
)
from .state import load_optimizer, optimizer_tensors, rng_state, set_rng_state


class TrainError(Exception):
    """A problem the user must fix before (or while) training; the message says which."""


# ----------------------------------------------------------------------------- the loop
class Trainer:
    def __init__(
        self,
        data_dir: Path,
        run_dir: Path,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        meta: dict,
        *,
        resume: bool,
        fall_back: bool = False,
        device: str | None = None,
        progress: bool = True,
        init: InitFrom | None = None,
    ):
        """``resume``: continue RUN_DIR from its newest checkpoint; ``fall_back`` (--resume auto): from
        the newest that verifies, setting aside the damaged ones after it with a warning each.
        ``init`` (--init, fine-tuning): a fresh start takes its weights (and with ``keep_optimizer`` its
        Adam state) from that checkpoint; the schedule and the step counter start anew."""
        self.data_dir, self.run_dir, self.meta = data_dir, run_dir, meta
        self.model_cfg, self.cfg = model_cfg, train_cfg
        topo = distributed.Topology.from_env()
        self.world, self.rank = topo.world, topo.rank
        self.is_main = self.rank == 0
        try:
            self.device = distributed.resolve_device(device, topo.local_rank)
        except RuntimeError:
            raise TrainError(f"--device {device}: not a device (cpu, cuda, cuda:1 ...)") from None
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise TrainError(f"--device {device}: CUDA is not available on this machine")
        if self.device.type == "cuda" and self.device.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            gpus = f"{count} CUDA device{'s' if count != 1 else ''}"
            if device and torch.device(device).index is not None:  # --device cuda:3 on a 1-GPU machine
                raise TrainError(f"--device {device}: this machine has {gpus} (cuda:0 to cuda:{count - 1})")
            # torchrun --nproc-per-node 2 on a machine with one GPU: local rank 1 would take cuda:1
            raise TrainError(
                f"local rank {topo.local_rank} would train on {self.device}, but this machine has "
                f"{gpus}: start at most {count} process{'es' if count != 1 else ''} per machine "
                "(torchrun --nproc-per-node), give --device cuda:0 where each process sees only "
                "its own GPU (CUDA_VISIBLE_DEVICES), or train on the CPU with --device cpu"
            )
        if self.device.type == "cpu":
            keep_freed_memory()  # ~1.25x faster steps on CPU: no page faults for large tensors
        if (topo.launched or self.world > 1) and not dist.is_initialized():
            distributed.init_process_group(self.device, timeout_minutes=train_cfg.collective_timeout)
        self.coll = distributed.Collectives(
            device=self.device,
            rank=self.rank,
            world=self.world,
            active=dist.is_initialized(),
            timeout_minutes=train_cfg.collective_timeout,
        )
        if train_cfg.num_threads:
            torch.set_num_threads(train_cfg.num_threads)
        try:
            self.amp_dtype, self.precision_note = resolve_precision(train_cfg.precision, self.device)
        except ValueError as e:
            raise ConfigError(f"train.{e}") from None
        self.progress = progress and self.is_main and sys.stderr.isatty()

        # the train segmentations: the usual one, or epoch e on BPE-dropout copy (e mod K) + 1
        self.train_sets = [ParallelDataset.load(data_dir, "train")]
        samples = meta.get("train_samples")
        if samples and train_cfg.bpe_dropout:
            self.train_sets = [ParallelDataset(data_dir, name, meta) for name in samples["splits"]]
            if any(len(d) != samples["pairs"] for d in self.train_sets):
                raise TrainError(
                    f"{data_dir}: a BPE-dropout copy does not hold the "
                    f"{samples['pairs']} train pairs meta.json names; prepare again"
                )
        self.valid_set = (
            ParallelDataset.load(data_dir, "valid") if "valid" in meta.get("splits", {"valid": 1}) else None
        )
        self.sampler = TokenBatchSampler(
            src_lengths=[d.src_lengths for d in self.train_sets],
            tgt_lengths=[d.tgt_lengths for d in self.train_sets],
            max_tokens=train_cfg.max_tokens,
            seed=train_cfg.seed,
            num_replicas=self.world,
            rank=self.rank,
        )
        self.accum = self._accumulation_steps()
        self.valid_too_long = (
            validation.too_long(self.valid_set, model_cfg.max_positions) if self.valid_set is not None else 0
        )

        ckpt.check_fits_in_memory(model_cfg, source="the model configuration")
        torch.manual_seed(train_cfg.seed)
        self.model = Transformer(model_cfg).to(self.device)
        self.ddp = None
        if self.coll.active:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.optimizer = build_adam(
            self.model.parameters(),
            betas=(train_cfg.adam_beta1, train_cfg.adam_beta2),
            eps=train_cfg.adam_eps,
            weight_decay=train_cfg.weight_decay,
        )
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        self.step = 0  # the data position (epoch, batch) is the sampler's state
        self.best: float | None = None
        self.best_step: int | None = None  # the step whose checkpoint `best` holds (or is being given)
        self.since_best = 0  # validations since best_metric last improved (train.patience)
        self.init = init
        self.init_record = init.record() if init is not None else None  # where the weights started
        self.validation_pending = False  # a stop signal cut the validation of the last checkpoint short
        self.elapsed = 0.0
        self.tokens_seen = 0
        self.decay_start = self.decay_end = 0  # updates of train.decay_fraction's decay; 0 = not started
        self.tb = None
        self.lock: RunLock | None = None
        self.log_error: str | None = None  # the first failed write to train.log / metrics.jsonl
        self.unwritten: dict[str, list[str]] = {}  # log lines not written since (kept in the checkpoint)
        self.preemption = distributed.Preemption()  # entered by run()
        self.stopped_by: str | None = None  # "SIGTERM" / "SIGINT" when a signal stopped the run
        self._prepare_run_dir(resume, fall_back=fall_back)

    # -- set-up
    def _accumulation_steps(self) -> int:
        """Micro-batches per update so that world * accum * (mean target tokens per batch) ~
        update_tokens. The mean is over the batches of all shards (summed across ranks), so every rank
        gets the same count."""
        if self.cfg.accum_steps:
            return self.cfg.accum_steps
        batches = self.sampler.batches(0)
        tgt = self.train_sets[0].tgt_lengths
        tokens = sum(int(tgt[b].sum()) + len(b) for b in batches)  # target tokens incl. EOS
        tokens, n_batches = self.coll.sum([tokens, len(batches)], what="the accumulation count")
        mean_tokens = tokens / n_batches if n_batches else 1.0
        return max(1, round(self.cfg.update_tokens / (self.world * mean_tokens)))

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def position(self) -> int:
        return self.sampler.position

    def _prepare_run_dir(self, resume: bool, *, fall_back: bool) -> None:
        """Own RUN_DIR (its lock: a second `nmt train` on it is refused and touches nothing), then
        start or resume it; the lock is released if that fails."""
        created = not self.run_dir.exists()
        refusal, stale = "", []
        if self.is_main:
            try:
                self.lock = RunLock.acquire(self.run_dir)
                stale = ckpt.clean_stale(self.run_dir / "checkpoints")  # ours now: no live writer
            except RunDirError as e:
                refusal = str(e)
        if self.coll.sum([bool(refusal)], what="the run directory lock")[0]:  # also: rank 0 has cleaned
            raise TrainError(
                refusal or f"{self.run_dir}: rank 0 could not own the run directory (see its error)"
            )
        try:
            self._start_or_resume(resume, fall_back=fall_back, stale=stale)
        except RunDirError as e:
            self.release(remove_empty=created)
            raise TrainError(str(e)) from None
        except BaseException:
            self.release(remove_empty=created)
            raise

    def release(self, *, remove_empty: bool = False) -> None:
        """Give up RUN_DIR (delete its lock file); ``remove_empty``: and the directory, if the lock
        file was all it held."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None
            if remove_empty and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()

    def _start_or_resume(self, resume: bool, *, fall_back: bool, stale: list[str]) -> None:
        """Start or resume RUN_DIR. A run directory with no complete checkpoint (killed before its
        first one, or stopped by the disk check) is not stuck: a plain start begins it again with
        the new configuration, ``--resume`` begins it again with its saved config.json."""
        config_path = self.run_dir / "config.json"
        complete = ckpt.list_step_checkpoints(self.run_dir)
        checkpoint_bytes = 4 * sum(p.numel() for p in self.model.parameters()) * 3  # weights + 2 Adam moments
        if resume and complete:
            if self.is_main:
                check_free_space(
                    self.run_dir, checkpoint_bytes=checkpoint_bytes, keep_last=self.cfg.keep_last
                )
            self._resume(complete, fall_back=fall_back)
            if config_path.exists():  # a fine-tuned run keeps saying where its weights started
                self.init_record = ckpt.read_json(config_path).get("init")
            if self.is_main:
                mended = mend_best(self.run_dir, self.best_step)
                self._rotate()  # what a kill after the checkpoint (or the copy to best) left undone
                trim_metrics(self.run_dir / "metrics.jsonl", self.step)
                self._write_unwritten()
                if stale:
                    self.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
                if mended:
                    self.log(mended)
            return
        if resume and not config_path.exists():
            raise TrainError(f"--resume: {self.run_dir} holds no run to resume (no config.json)")
        if complete:
            raise TrainError(
                f"{self.run_dir} already holds a run; use --resume to continue it or choose another --out"
            )
        restart = config_path.exists()
        self.coll.barrier(what="the run directory check")  # every rank has checked before rank 0 writes
        if self.is_main:
            check_free_space(self.run_dir, checkpoint_bytes=checkpoint_bytes, keep_last=self.cfg.keep_last)
            if restart:  # a start that never reached a checkpoint: its logs describe nothing kept
                trim_metrics(self.run_dir / "metrics.jsonl", self.step)
            try:
                write_text(config_path, json.dumps(self.full_config(), indent=2) + "\n")
            except OSError as e:
                raise TrainError(
                    f"could not write {config_path}: {e.strerror or e} (free some space, then start again)"
                ) from None
            if restart:
                self.log(
                    f"{self.run_dir} has no complete checkpoint (a start killed before its first "
                    "one): starting it again from step 0"
                )
            if stale:
                self.log(f"removed stale temporaries of a killed run: {', '.join(stale)}")
        if self.init is not None:
            self._load_init(self.init)

    def _load_init(self, init: InitFrom) -> None:
        """Fine-tuning: the weights of ``init`` (every rank loads them, so DDP's replicas agree), and
        with ``keep_optimizer`` its Adam moments; step, schedule and data position start at 0."""
        ckpt.load_weights(
            self.model, ckpt.load_state(init.directory), source=str(init.directory / "model.safetensors")
        )
        if init.keep_optimizer:
            try:
                load_optimizer(
                    self.optimizer,
                    ckpt.load_tensors(init.directory / "optimizer.safetensors"),
                    ckpt.read_json(init.directory / "optimizer.json"),
                )
            except (KeyError, ValueError, TypeError, RuntimeError) as e:
                raise ckpt.CheckpointError(
                    f"{init.directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
                ) from None
        self.log(
            f"initialised from {init.directory} (model.safetensors sha256 {init.sha256[:12]}...; "
            f"{'its optimizer state kept' if init.keep_optimizer else 'new optimizer state'}; "
            "schedule and step counter start anew)"
        )

    def _resume(self, complete: list[Path], *, fall_back: bool) -> None:
        """Load the newest of the ``complete`` checkpoints; with ``fall_back`` (--resume auto) the
        newest that verifies and loads, the damaged ones after it set aside as ``corrupt-step_N``
        (kept for inspection, never listed as checkpoints) with a warning naming each."""
        damaged = []
        for directory in reversed(complete):
            try:
                self._load(directory)
                break
            except ckpt.CheckpointError as e:
                if not fall_back:
                    raise
                damaged.append((directory, e))
        else:
            raise TrainError(
                f"--resume auto: none of the {len(complete)} checkpoints of {self.run_dir} "
                f"verifies (the newest: {damaged[0][1]})"
            )
        self.coll.barrier(what="choosing the checkpoint to resume from")
        for directory, e in damaged if self.is_main else []:
            self.log(
                f"warning: {directory} is damaged ({e}); set aside as {set_aside(directory).name}, "
                "resuming from an older checkpoint (delete it once inspected)"
            )
        self.log(
            f"resumed from {self.run_dir / 'checkpoints' / f'step_{self.step:08d}'} at step {self.step} "
            f"(epoch {self.epoch}, batch {self.position})"
        )

    def _write_unwritten(self) -> None:
        """Append the log lines a full disk kept from the files (the checkpoint held them)."""
        try:
            write_unwritten(self.run_dir, self.unwritten)
            self.unwritten = {}
        except OSError as e:
            self.log_error = f"could not write {e.filename}: {e.strerror or e}"

    def finished(self) -> str | None:
        """The limit a (resumed) run has already reached, or None."""
        cfg = self.cfg
        if cfg.max_steps and self.step >= cfg.max_steps:
            return f"max_steps={cfg.max_steps}"
        if cfg.max_epochs and self.epoch >= cfg.max_epochs:
            return f"max_epochs={cfg.max_epochs}"
        if self.decay_end and self.step >= self.decay_end:
            return f"the end of the learning-rate decay (update {self.decay_end})"
        if cfg.max_time and self.elapsed >= cfg.max_time * 60:
            return f"max_time={cfg.max_time} min"
        if self.out_of_patience():
            return (
                f"patience={cfg.patience}: {self.since_best} validations without a better {cfg.best_metric}"
            )
        return None

    def out_of_patience(self) -> bool:
        """Early stopping (fairseq's --patience, Marian's --early-stopping): ``train.patience``
        validations in a row without a better ``best_metric``."""
        return bool(self.cfg.patience) and self.since_best >= self.cfg.patience

    def full_config(self) -> dict:
        config = {
            "model": to_dict(self.model_cfg),
            "train": to_dict(self.cfg),
            "data": self.meta,
            "data_dir": str(self.data_dir),
        }
        if self.init_record is not None:
            config["init"] = self.init_record
        return config

    def _load(self, directory: Path) -> None:
        ckpt.verify(directory)
        ckpt.load_weights(self.model, ckpt.load_state(directory), source=str(directory / "model.safetensors"))
        optimizer_meta, state = (
            ckpt.read_json(directory / name) for name in ("optimizer.json", "trainer_state.json")
        )
        try:
            load_optimizer(
                self.optimizer, ckpt.load_tensors(directory / "optimizer.safetensors"), optimizer_meta
            )
        except (KeyError, ValueError, TypeError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{directory / 'optimizer.safetensors'}: does not match the model's optimizer ({e})"
            ) from None
        if state.get("world_size", 1) != self.world:
            raise TrainError(
                f"{directory}: saved with {state.get('world_size', 1)} processes; resume "
                f"with the same number (now {self.world}) for an exact continuation"
            )
        try:
            self.step = int(state["step"])
            sampler_state = dict(state)
            if "positions" in state:  # every rank's data position (equal by construction; checked)
                sampler_state["epoch"], sampler_state["position"] = state["positions"][self.rank]
            self.sampler.load_state_dict(sampler_state)
            self.best, self.elapsed, self.tokens_seen = state["best"], state["elapsed"], state["tokens_seen"]
            self.decay_start, self.decay_end = (
                int(state.get("decay_start", 0)),
                int(state.get("decay_end", 0)),
            )
            self.best_step = state.get("best_step")  # absent before issue 42
            self.since_best = int(state.get("since_best", 0))
            self.validation_pending = bool(state.get("validation_pending", False))
            self.unwritten = {
                str(k): [str(line) for line in v] for k, v in state.get("unwritten_log", {}).items()
            }
            set_rng_state(state["rng"][self.rank] if isinstance(state["rng"], list) else state["rng"])
        except (KeyError, IndexError, TypeError, ValueError, RuntimeError) as e:
            raise ckpt.CheckpointError(
                f"{directory / 'trainer_state.json'}: malformed ({type(e).__name__}: {e})"
            ) from None

    # -- logging
    def log(self, message: str) -> None:
        if self.is_main:
            print(message, file=sys.stderr, flush=True)
            self._append("train.log", f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def metric(self, record: dict) -> None:
        if self.is_main:
            self._append("metrics.jsonl", json.dumps(record) + "\n")
            if self.tb is not None:
                for k, v in record.items():
                    if isinstance(v, (int, float)) and k != "step":
                        self.tb.add_scalar(f"{record.get('split', 'train')}/{k}", v, record["step"])

    def _append(self, name: str, line: str) -> None:
        """Append a line to a log of the run. Once a write fails (a full disk), no file is written
        again: the lines are kept for the next checkpoint, which a resume appends them from, and the
        loop stops at the next update with that checkpoint."""
        if self.log_error is None:
            try:
                with open(self.run_dir / name, "a") as f:
                    f.write(line)
                return
            except OSError as e:
                self.log_error = f"could not write {self.run_dir / name}: {e.strerror or e}"
        self.unwritten.setdefault(name, []).append(line)

    # -- data stream: micro-batches across epochs, with the position of the next one
    def micro_batches(self):
        while True:
            if self.cfg.max_epochs and self.epoch >= self.cfg.max_epochs:
                return
            train_set = self.train_sets[self.epoch % len(self.train_sets)]
            for indices in self.sampler:  # advances the sampler's position
                yield collate([self.pair(train_set, i) for i in indices])
            self.sampler.set_epoch(self.epoch + 1)

    def pair(self, dataset, i: int, limit: int = 0):
        """Pair ``i`` of ``dataset`` as the model learns it: (source, target) pieces, the target
        reversed for a right-to-left model (ModelConfig.right_to_left); ``limit``: truncated first."""
        src, tgt = dataset[i] if not limit else validation.truncate(dataset[i], limit)
        return (src, tgt[::-1]) if self.model_cfg.right_to_left else (src, tgt)

    def forward_loss(self, model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        batch = batch.to(self.device)
        keep = batch.tgt_out.ne(PAD)  # (B, T): only real target tokens are projected and scored
        tgt_in = batch.tgt_in  # (B, T): BOS, then the target shifted right
        if self.cfg.target_dropout and model.training:  # not the paper's: see TrainConfig.target_dropout
            drop = torch.rand(tgt_in.shape, device=tgt_in.device).lt(self.cfg.target_dropout)  # (B, T)
            drop[:, 0] = False  # BOS stays
            tgt_in = tgt_in.masked_fill(drop & tgt_in.ne(PAD), UNK)
        with autocast(self.device, self.amp_dtype):
            logits = model(batch.src, tgt_in, keep)  # (K, W)
        return fused_label_smoothed_nll_loss(
            logits, batch.tgt_out[keep], epsilon=self.cfg.label_smoothing, kind=self.cfg.label_smoothing_kind
        )

    def train_step(self, micro: list[Batch], total_tokens: float) -> dict:
        """One update on this rank's ``micro``-batches; ``total_tokens``: target tokens of the update
        on all ranks."""
        self.model.train()
        # DDP averages gradients over ranks; multiply by world so the result is d(sum)/total
        scale = self.world / total_tokens
        sums = torch.zeros(2, device=self.device)  # (loss, nll) sums of the update, read once
        model = self.ddp or self.model
        for i, batch in enumerate(micro):
            sync = self.ddp is None or i == len(micro) - 1
            ctx = self.ddp.no_sync() if not sync else contextlib.nullcontext()
            with ctx, self.coll.guard("the gradient all-reduce") if sync else contextlib.nullcontext():
                loss, nll, _ = self.forward_loss(model, batch)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            sums += torch.stack([loss.detach(), nll.detach()])
        lr = inverse_sqrt_lr(
            self.step + 1,
            d_model=self.model_cfg.d_model,
            warmup_steps=self.cfg.warmup_steps,
            lr_scale=self.cfg.lr_scale,
        )
        lr *= linear_decay(self.step + 1, decay_start=self.decay_start, decay_end=self.decay_end)
        set_lr(self.optimizer, lr)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf")
        )
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.coll.sum_(sums, what="the loss all-reduce")
        return {
            "loss": sums[0].item() / total_tokens,
            "nll": sums[1].item() / total_tokens,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "tokens": total_tokens,
        }

    @torch.no_grad()
    def validate(self) -> dict:
        self.model.eval()
        sampler = TokenBatchSampler(
            src_lengths=self.valid_set.src_lengths,
            tgt_lengths=self.valid_set.tgt_lengths,
            max_tokens=self.cfg.max_tokens,
            shuffle=False,
        )
        loss_sum = nll_sum = tokens = 0.0
        limit = self.model_cfg.max_positions  # longer pairs are truncated, as translation does
        for indices in sampler.batches(0):
            batch = collate([self.pair(self.valid_set, i, limit) for i in indices])
            loss, nll, n = self.forward_loss(self.model, batch)
            loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n
        out = {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50))}
        if self.cfg.valid_bleu:
            out.update(self.validate_bleu())
        return out

    def validate_bleu(self) -> dict:
        return validation.bleu_on_split(
            self.model,
            self.data_dir,
            "valid",
            beam=self.cfg.valid_bleu_beam,
            max_sentences=self.cfg.valid_bleu_max_sentences,
            device=self.device,
            amp_dtype=self.amp_dtype,
        )

    def save(self, *, rotate: bool = True) -> Path:
        """Write checkpoint step_N (collective); ``rotate``: then delete those past keep_last."""
        directory = self.run_dir / "checkpoints" / f"step_{self.step:08d}"
        ranks = self.coll.gather_objects(
            {"rng": rng_state(), "position": [self.epoch, self.position]},
            what="gathering RNG states and data positions for the checkpoint",
        )
        rngs = [r["rng"] for r in ranks]
        if self.is_main:
            tensors, meta = optimizer_tensors(self.optimizer)
            state = {
                "step": self.step,
                **self.sampler.state_dict(),
                "best": self.best,
                "best_step": self.best_step,
                "since_best": self.since_best,
                "validation_pending": self.validation_pending,
                "elapsed": self.elapsed,
                "tokens_seen": self.tokens_seen,
                "world_size": self.world,
                "decay_start": self.decay_start,
                "decay_end": self.decay_end,
                "accum": self.accum,
                "rng": rngs if self.world > 1 else rngs[0],
                "positions": [r["position"] for r in ranks],
            }
            if self.unwritten:
                state["unwritten_log"] = self.unwritten
            try:
                ckpt.save(
                    directory,
                    model=self.model,
                    config=self.full_config(),
                    spm_model=self.data_dir / "spm.model",
                    trainer_state=state,
                    optimizer_tensors=tensors,
                    optimizer_meta=meta,
                )
            except OSError as e:
                raise TrainError(
                    f"could not write checkpoint {directory}: {e.strerror or e} "
                    "(the previous checkpoints are intact)"
                ) from None
            if rotate:
                self._rotate()
        self.coll.barrier(what="the barrier after writing a checkpoint")
        return directory

    def _rotate(self) -> None:
        for old in ckpt.list_step_checkpoints(self.run_dir)[: -self.cfg.keep_last]:
            ckpt.remove_checkpoint(old)

    def _save_on_stop(self) -> None:
        """The checkpoint of a run stopped by a signal or a log it cannot write."""
        try:
            self.save()
        except TrainError as e:
            if self.log_error is None:
                raise
            raise TrainError(
                f"{self.log_error}, and {e}: free some space, then continue with --resume auto"
            ) from None

    def run(self) -> dict:
        """Train until a limit, the end of the data (max_epochs), SIGTERM or SIGINT; returns the last
        train record. RUN_DIR is released at the end."""
        try:
            with distributed.Preemption() as self.preemption:
                return self._loop()
        finally:
            if self.tb is not None:
                with contextlib.suppress(Exception):  # a full disk: the error said so already
                    self.tb.close()
                self.tb = None
            self.release()

    def _loop(self) -> dict:
        cfg = self.cfg
        if self.log_error:
            raise TrainError(
                f"{self.log_error}: nothing trained since step {self.step}, nothing lost (free "
                "some space, then run again)"
            )
        if self.validation_pending:  # a stop signal cut this checkpoint's validation short: do it now
            self.log(f"validating step {self.step} (its validation was interrupted)")
            self.validate_and_keep_best()
            if self.validation_pending:
                return self._stopped("preempted")
        done = self.finished()
        if done:  # a resumed run that already reached its limit: training past it changes the run
            self.log(
                f"{self.run_dir}: the run already finished at step {self.step} ({done}); nothing "
                "to do (raise the limit with --train.* to train further)"
            )
            return {}
        if self.valid_too_long:
            self.log(
                f"warning: {self.valid_too_long} of {len(self.valid_set)} valid pairs have a side longer "
                f"than model.max_positions={self.model_cfg.max_positions} (with EOS/BOS); validation "
                "truncates them"
            )
        if self.is_main:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception:  # tensorboard not installed: metrics.jsonl is enough
                self.tb = None
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(
            f"model: {n_params:,} parameters; precision: {self.precision_note}; device: {self.device}; "
            f"world size {self.world}{f' ({dist.get_backend()})' if self.coll.active else ''}; "
            f"{self.accum} micro-batch(es) of <= {cfg.max_tokens} tokens per update "
            f"(~{cfg.update_tokens} target tokens)"
        )
        if len(self.train_sets) > 1:
            k = len(self.train_sets)
            self.log(
                f"BPE-dropout (p={self.meta['train_samples']['bpe_dropout']}): {k} sampled "
                f"segmentations of train; epoch e trains on train.bpe{{(e mod {k}) + 1}}"
            )
        stream = self.micro_batches()
        start, last_save = time.time() - self.elapsed, time.time()
        bar = None
        if self.progress:
            from tqdm import tqdm

            if cfg.max_time:  # the time limit binds: the bar (and its ETA) counts training seconds
                bar = tqdm(
                    total=round(cfg.max_time * 60),
                    initial=round(self.elapsed),
                    unit="s",
                    dynamic_ncols=True,
                    desc="train",
                )
            else:
                bar = tqdm(
                    total=cfg.max_steps or None,
                    initial=self.step,
                    unit="step",
                    dynamic_ncols=True,
                    desc="train",
                )
        window_tokens, window_start, last = 0, time.time(), {}
        window_loss = window_nll = 0.0  # token-weighted sums since the last log line
        stop = None
        while stop is None:
            self.coll.step = self.step + 1
            micro = list(itertools.islice(stream, self.accum))
            # one all-reduce: the update's target tokens, and whether some rank's data has ended
            total_tokens, exhausted = self.coll.sum(
                [sum(b.n_tgt_tokens for b in micro), not micro], what="the token count all-reduce"
            )
            if exhausted:  # max_epochs: every rank stops at the same update
                stop = "max_epochs"
                break
            stats = self.train_step(micro, total_tokens)
            self.tokens_seen += int(stats["tokens"])
            self.elapsed = time.time() - start
            window_tokens += stats["tokens"]
            window_loss += stats["loss"] * stats["tokens"]
            window_nll += stats["nll"] * stats["tokens"]
            if self.step % cfg.log_every_steps == 0 or self.step == 1:
                rate = window_tokens / max(time.time() - window_start, 1e-9)
                loss, nll = window_loss / window_tokens, window_nll / window_tokens  # window means
                window_tokens, window_start, window_loss, window_nll = 0, time.time(), 0.0, 0.0
                last = {
                    "split": "train",
                    "step": self.step,
                    "epoch": self.epoch,
                    "loss": loss,
                    "nll": nll,
                    "ppl": math.exp(min(nll, 50)),
                    "lr": stats["lr"],
                    "grad_norm": stats["grad_norm"],
                    "tgt_tokens_per_s": rate,
                    "elapsed": self.elapsed,
                }
                self.metric(last)
                if bar is not None:
                    bar.set_postfix(
                        step=self.step, loss=f"{loss:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{rate:.0f}"
                    )
            if bar is not None:
                bar.update(round(self.elapsed) - bar.n if cfg.max_time else 1)
            # one decision for the whole job: rank 0's counters and clock, any rank's SIGTERM
            decision = self.coll.decide(
                distributed.local_decision(
                    step=self.step,
                    elapsed=self.elapsed,
                    since_save=time.time() - last_save,
                    max_steps=cfg.max_steps,
                    max_time=cfg.max_time,
                    save_every_steps=cfg.save_every_steps,
                    save_every_minutes=cfg.save_every_minutes,
                    valid_every_steps=cfg.valid_every_steps,
                    decay_fraction=cfg.decay_fraction,
                    decay_end=self.decay_end,
                ),
                preempted=self.preemption.requested or self.log_error is not None,
            )
            if decision.decay:
                self.start_decay()
            stop = decision.stop
            if stop == "preempted":  # the scheduler's grace period is short: checkpoint, no validation
                # done first on resume, as this run would have done it now
                self.validation_pending = decision.validate and self.valid_set is not None
                self._save_on_stop()
            elif stop or decision.validate:
                self.validate_and_keep_best()
                last_save = time.time()
                if self.validation_pending:  # interrupted by a signal: the checkpoint is written
                    stop = "preempted"
                elif stop is None and self.out_of_patience():  # since_best is rank 0's, shared
                    stop = "patience"
            elif decision.save:
                self.save()
                last_save = time.time()
        if bar is not None:
            bar.close()
        if stop == "max_epochs":
            self.validate_and_keep_best()
            stop = "preempted" if self.validation_pending else stop
        self._stopped(stop)
        return last

    def _stopped(self, stop: str) -> dict:
        """Say why the run stopped; a log that could not be written is an error (the checkpoint is
        written)."""
        if stop == "preempted" and self.log_error is not None:
            raise TrainError(
                f"{self.log_error}; checkpoint {self.run_dir / 'checkpoints' / f'step_{self.step:08d}'} "
                "written (it holds the lines not written): free some space, then continue with "
                "--resume auto"
            )
        if stop == "preempted":
            self.stopped_by = self.preemption.signal_name or "SIGTERM"
            self.log(
                f"{'interrupted' if self.stopped_by == 'SIGINT' else 'preempted'} at step {self.step} "
                f"({self.stopped_by}): checkpoint written; continue with --resume auto"
            )
        if stop == "patience":
            self.log(
                f"early stopping: {self.since_best} validations without a better valid "
                f"{self.cfg.best_metric} "
                f"(train.patience={self.cfg.patience}); the best is step {self.best_step}, in "
                f"{self.run_dir / 'checkpoints' / 'best'}"
            )
        self.log(f"stopped ({stop}) at step {self.step}, epoch {self.epoch}, {self.elapsed / 60:.1f} min")
        return {}

    def start_decay(self) -> None:
        """Fix the updates of the final linear decay (train.decay_fraction), after update self.step:
        it ends at max_steps when the steps limit started it, else after as many updates as the
        remaining time holds at the rate so far (step / (1 - decay_fraction) in all), or max_steps."""
        cfg, keep = self.cfg, 1.0 - self.cfg.decay_fraction
        if cfg.max_steps and self.step >= keep * cfg.max_steps:
            end = cfg.max_steps
        else:  # max_time started it
            end = math.ceil(self.step / keep)
            end = min(end, cfg.max_steps) if cfg.max_steps else end
        self.decay_start, self.decay_end = self.step, max(end, self.step + 1)
        self.log(
            f"learning-rate decay: linear from update {self.decay_start} to {self.decay_end} "
            f"(decay_fraction {cfg.decay_fraction})"
        )

    def validate_and_keep_best(self) -> None:
        """Validate (rank 0), save a step checkpoint, copy it to ``best`` when it improves, then delete
        the step checkpoints past keep_last. The checkpoint names the best step before ``best`` is
        replaced and nothing is deleted before the copy is complete, so a kill at any point leaves
        the best model in ``best`` or in its step checkpoint, which a resume copies to ``best`` again
        (`run_dir.mend_best`). A stop signal ends the validation at once: the checkpoint is saved
        with its validation pending, which a resume does first (as the uninterrupted run did)."""
        result, improved, interrupted = None, False, False
        if self.is_main and self.valid_set is not None:
            try:
                with self.preemption.interruptible():
                    result = self.validate()
            except distributed.Interrupted:
                interrupted = True
        if result is not None:
            score = -result["bleu"] if self.cfg.best_metric == "bleu" else result["loss"]  # lower is better
            improved = self.best is None or score < self.best
            if improved:
                self.best, self.best_step = score, self.step
            self.since_best = 0 if improved else self.since_best + 1
            record = {"split": "valid", "step": self.step, "epoch": self.epoch, **result}
            self.metric(record)
            self.log(
                "valid step {}: {}{}".format(
                    self.step,
                    ", ".join(f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)),
                    " (best)" if improved else "",
                )
            )
        if self.world > 1:
            shared = [self.best, self.best_step, self.since_best, interrupted]
            dist.broadcast_object_list(shared, src=0)
            self.best, self.best_step, self.since_best, interrupted = shared
        self.validation_pending = interrupted
        directory = self.save(rotate=False)
        if improved:
            try:
                ckpt.copy_checkpoint(directory, self.run_dir / "checkpoints" / "best")
            except OSError as e:
                raise TrainError(
                    f"could not copy {directory} to best: {e.strerror or e} (the previous best is intact)"
                ) from None
        if self.is_main:
            self._rotate()
        if interrupted:
            self.log(
                f"validation of step {self.step} interrupted ({self.preemption.signal_name}): "
                "checkpoint written, its validation pending"
            )
