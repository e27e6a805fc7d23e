"""`nmt train`: the paper's training (section 5) in one straight loop (`Trainer._loop`).

Per optimizer step (`Trainer.train_step`): take ``accum`` micro-batches (each <= max_tokens padded
tokens per side) so that about ``update_tokens`` target tokens are seen (5.1), count the target tokens
of the whole update across ranks, backpropagate the label-smoothed loss sum divided by that count
(5.4), clip (train.clip_norm; the paper does not), set the learning rate of eq. 3 (5.3), Adam step.
Then log, and one decision for the whole job: validate (keeping the best), checkpoint, or stop
(`stopping.py`: max_steps, max_epochs, max_time, the end of the decay, patience, a stop signal).

Run under ``torchrun --nproc_per_node=K -m nmt train ...`` for DistributedDataParallel (gloo on CPU,
nccl on CUDA); rank 0 writes checkpoints and logs (`run_log.py`). Every stop/save/validate decision is
taken once per update for the whole job (`distributed.py`); SIGTERM (exit 0) and Ctrl-C (exit 130)
checkpoint at the next update, or at once during validation. RUN_DIR has one owner
(`run_dir.RunLock`); a crash at any point loses no checkpoint and no best model
(`checkpointing.keep_best`, `run_dir.mend_best`); a log that cannot be written (a full disk) stops the
run with a checkpoint that holds the unwritten lines.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .. import checkpoint as ckpt
from ..allocator import keep_freed_memory
from ..config import ConfigError, ModelConfig, TrainConfig, to_dict
from ..data.batching import Batch, TokenBatchSampler, collate
from ..data.prepare import ParallelDataset
from ..errors import UserError
from ..model import Transformer
from ..parameter_counts import parameter_counts
from ..precision import autocast, resolve_precision
from ..vocab import PAD, UNK
from . import checkpointing, distributed, stopping
from . import validate as validation
from .cpu_warning import cpu_warning, paper_sized
from .finetune import InitFrom
from .loss import fused_label_smoothed_nll_loss
from .optim import build_adam, inverse_sqrt_lr, linear_decay, set_lr
from .run_dir import RunDirError, RunLock
from .run_log import LossWindow, RunLog, progress_bar


class TrainError(UserError):
    """A problem the user must fix before (or while) training; the message says which."""


def train_device(device: str | None, local_rank: int) -> torch.device:
    """The device to train on (`distributed.resolve_device`), or a TrainError saying why it cannot be."""
    try:
        resolved = distributed.resolve_device(device, local_rank)
    except RuntimeError:
        raise TrainError(f"--device {device}: not a device (cpu, cuda, cuda:1 ...)") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise TrainError(f"--device {device}: CUDA is not available on this machine")
    if resolved.type == "cuda" and resolved.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        gpus = f"{count} CUDA device{'s' if count != 1 else ''}"
        if device and torch.device(device).index is not None:  # --device cuda:3 on a 1-GPU machine
            raise TrainError(f"--device {device}: this machine has {gpus} (cuda:0 to cuda:{count - 1})")
        # torchrun --nproc-per-node 2 on a machine with one GPU: local rank 1 would take cuda:1
        raise TrainError(
            f"local rank {local_rank} would train on {resolved}, but this machine has "
            f"{gpus}: start at most {count} process{'es' if count != 1 else ''} per machine "
            "(torchrun --nproc-per-node), give --device cuda:0 where each process sees only "
            "its own GPU (CUDA_VISIBLE_DEVICES), or train on the CPU with --device cpu"
        )
    return resolved


def train_segmentations(data_dir: Path, meta: dict, *, bpe_dropout: bool) -> list[ParallelDataset]:
    """The train segmentations: the usual one, or with BPE-dropout the K sampled copies (epoch e trains
    on copy (e mod K) + 1)."""
    sets = [ParallelDataset.load(data_dir, "train")]
    samples = meta.get("train_samples")
    if samples and bpe_dropout:
        sets = [ParallelDataset(data_dir, name, meta) for name in samples["splits"]]
        if any(len(d) != samples["pairs"] for d in sets):
            raise TrainError(
                f"{data_dir}: a BPE-dropout copy does not hold the "
                f"{samples['pairs']} train pairs meta.json names; prepare again"
            )
    return sets


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
        self.device = train_device(device, topo.local_rank)
        if self.device.type == "cpu":
            keep_freed_memory()  # ~1.25x faster steps on CPU: no page faults for large tensors
        self.coll = self._join_job(topo)
        if train_cfg.num_threads:
            torch.set_num_threads(train_cfg.num_threads)
        try:
            self.amp_dtype, self.precision_note = resolve_precision(train_cfg.precision, self.device)
        except ValueError as e:
            raise ConfigError(f"train.{e}") from None
        self.progress = progress and self.is_main and sys.stderr.isatty()
        self._load_data()
        self._build_model()
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
        self.lock: RunLock | None = None
        self.logs = RunLog(run_dir, enabled=self.is_main)  # train.log, metrics.jsonl, tensorboard
        self.preemption = distributed.Preemption()  # entered by run()
        self.stopped_by: str | None = None  # "SIGTERM" / "SIGINT" when a signal stopped the run
        self._prepare_run_dir(resume, fall_back=fall_back)

    # -- set-up
    def _join_job(self, topo: distributed.Topology) -> distributed.Collectives:
        """The process group of a torchrun job (none for a single process) and its collectives."""
        if (topo.launched or self.world > 1) and not dist.is_initialized():
            distributed.init_process_group(self.device, timeout_minutes=self.cfg.collective_timeout)
        return distributed.Collectives(
            device=self.device,
            rank=self.rank,
            world=self.world,
            active=dist.is_initialized(),
            timeout_minutes=self.cfg.collective_timeout,
        )

    def _load_data(self) -> None:
        """The train segmentations and this rank's sampler over them, the accumulation count, the
        valid split (if prepared)."""
        self.train_sets = train_segmentations(self.data_dir, self.meta, bpe_dropout=self.cfg.bpe_dropout)
        splits = self.meta.get("splits", {"valid": 1})
        self.valid_set = ParallelDataset.load(self.data_dir, "valid") if "valid" in splits else None
        self.valid_empty = self.valid_set is not None and len(self.valid_set) == 0
        if self.valid_empty:  # no pair to score (its loss would divide by 0 tokens): as if not prepared
            self.valid_set = None
        self.sampler = TokenBatchSampler(
            src_lengths=[d.src_lengths for d in self.train_sets],
            tgt_lengths=[d.tgt_lengths for d in self.train_sets],
            max_tokens=self.cfg.max_tokens,
            seed=self.cfg.seed,
            num_replicas=self.world,
            rank=self.rank,
        )
        self.accum = self._accumulation_steps()
        limit = self.model_cfg.max_positions
        self.valid_too_long = validation.too_long(self.valid_set, limit) if self.valid_set is not None else 0

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

    def _build_model(self) -> None:
        """The model (seeded: every rank starts from the same weights), DDP around it in a job, Adam."""
        ckpt.check_fits_in_memory(self.model_cfg, source="the model configuration")
        torch.manual_seed(self.cfg.seed)
        self.model = Transformer(self.model_cfg).to(self.device)
        self.ddp = None
        if self.coll.active:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.optimizer = build_adam(
            self.model.parameters(),
            betas=(self.cfg.adam_beta1, self.cfg.adam_beta2),
            eps=self.cfg.adam_eps,
            weight_decay=self.cfg.weight_decay,
        )
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    @property
    def position(self) -> int:
        return self.sampler.position

    # -- the loop
    def run(self) -> dict:
        """Train until a limit, the end of the data (max_epochs), SIGTERM or SIGINT; returns the last
        train record. RUN_DIR is released at the end."""
        try:
            with distributed.Preemption() as self.preemption:
                return self._loop()
        finally:
            self.logs.close()
            self.release()

    def _loop(self) -> dict:
        """One update per turn (`train_step`), its log line (`_report`), then one decision for the
        whole job: validate and keep the best, checkpoint, or stop (`_after_update`)."""
        if not self._ready():
            return {}
        self._announce()
        stream, clock, bar = self.micro_batches(), stopping.Clock(self.elapsed), None
        if self.progress:
            bar = progress_bar(
                max_steps=self.cfg.max_steps, max_time=self.cfg.max_time, step=self.step, elapsed=self.elapsed
            )
        window, last, stop = LossWindow(), {}, None
        first, started = self.step + 1, self.elapsed  # the first update is timed (`_warn_on_cpu`)
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
            self.elapsed = clock.elapsed()
            if self.step == first:
                self._warn_on_cpu(self.elapsed - started, tokens=int(stats["tokens"]))
            window.add(stats)
            last = self._report(stats, window, bar) or last
            stop = self._after_update(clock)
        if bar is not None:
            bar.close()
        if stop == "max_epochs":  # the data has ended: validate (and checkpoint) the last update
            self.validate_and_keep_best()
            stop = "preempted" if self.validation_pending else stop
        self._stopped(stop)
        return last

    def _ready(self) -> bool:
        """Whether the loop may start: a log that cannot be written is an error; a validation that a
        stop signal interrupted is done first (as the uninterrupted run did); a resumed run that
        already reached its limit does nothing (training past it changes the run)."""
        if self.logs.error:
            raise TrainError(
                f"{self.logs.error}: nothing trained since step {self.step}, nothing lost (free "
                "some space, then run again)"
            )
        if self.validation_pending:
            self.logs.log(f"validating step {self.step} (its validation was interrupted)")
            self.validate_and_keep_best()
            if self.validation_pending:
                self._stopped("preempted")
                return False
        done = stopping.reached(
            self.cfg,
            step=self.step,
            epoch=self.epoch,
            elapsed=self.elapsed,
            decay_end=self.decay_end,
            since_best=self.since_best,
        )
        if done:
            self.logs.log(
                f"{self.run_dir}: the run already finished at step {self.step} ({done}); nothing "
                "to do (raise the limit with --train.* to train further)"
            )
            return False
        return True

    def _announce(self) -> None:
        """What the run trains, on what, how (train.log), and its tensorboard."""
        cfg = self.cfg
        if self.valid_empty:
            self.logs.log(
                f"warning: the valid split of {self.data_dir} has no pairs: no validation, no best "
                "checkpoint (prepare with --valid SRC TGT to validate)"
            )
        if self.valid_too_long:
            self.logs.log(
                f"warning: {self.valid_too_long} of {len(self.valid_set)} valid pairs have a side longer "
                f"than model.max_positions={self.model_cfg.max_positions} (with EOS/BOS); validation "
                "truncates them"
            )
        self.logs.open_tensorboard()
        n_params = sum(p.numel() for p in self.model.parameters())
        self.logs.log(
            f"model: {n_params:,} parameters; precision: {self.precision_note}; device: {self.device}; "
            f"world size {self.world}{f' ({dist.get_backend()})' if self.coll.active else ''}; "
            f"{self.accum} micro-batch(es) of <= {cfg.max_tokens} tokens per update "
            f"(~{cfg.update_tokens} target tokens)"
        )
        if len(self.train_sets) > 1:
            k = len(self.train_sets)
            self.logs.log(
                f"BPE-dropout (p={self.meta['train_samples']['bpe_dropout']}): {k} sampled "
                f"segmentations of train; epoch e trains on train.bpe{{(e mod {k}) + 1}}"
            )

    def _warn_on_cpu(self, seconds: float, *, tokens: int) -> None:
        """A paper-sized model on the CPU: the measured time of the first update, projected to the run."""
        counts = parameter_counts(self.model)
        if self.device.type == "cpu" and paper_sized(counts["encoder"] + counts["decoder"]):
            self.logs.log(
                cpu_warning(cfg=self.cfg, seconds_per_update=seconds, step=self.step, tokens=tokens)
            )

    def _report(self, stats: dict, window: LossWindow, bar) -> dict | None:
        """The train record (metrics.jsonl) of the first update and of every log_every_steps-th, its
        loss and nll the means over the window's target tokens (None for the other updates); the
        progress bar moves on."""
        record = None
        if self.step % self.cfg.log_every_steps == 0 or self.step == 1:
            loss, nll, rate = window.take()
            record = {
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
            self.logs.metric(record)
            if bar is not None:
                bar.set_postfix(
                    step=self.step, loss=f"{loss:.3f}", lr=f"{stats['lr']:.2e}", tok_s=f"{rate:.0f}"
                )
        if bar is not None:
            bar.update(round(self.elapsed) - bar.n if self.cfg.max_time else 1)
        return record

    def _after_update(self, clock: stopping.Clock) -> str | None:
        """One decision for the whole job (rank 0's counters and clock, any rank's stop signal or
        failed log), then what it says: start the decay; on a signal checkpoint at once; validate and
        keep the best (then maybe stop early); or checkpoint. Returns why the run stops, or None."""
        local = stopping.after_update(
            self.cfg,
            step=self.step,
            elapsed=self.elapsed,
            since_save=clock.since_save(),
            decay_end=self.decay_end,
        )
        decision = self.coll.decide(local, preempted=self.preemption.requested or self.logs.error is not None)
        if decision.decay:
            self.start_decay()
        stop = decision.stop
        if stop == "preempted":  # the scheduler's grace period is short: checkpoint, no validation
            # done first on resume, as this run would have done it now
            self.validation_pending = decision.validate and self.valid_set is not None
            self._save_on_stop()
        elif stop or decision.validate:
            self.validate_and_keep_best()
            clock.saved()
            if self.validation_pending:  # interrupted by a signal: the checkpoint is written
                stop = "preempted"
            elif stop is None and stopping.out_of_patience(self.cfg, self.since_best):  # rank 0's, shared
                stop = "patience"
        elif decision.save:
            self.save()
            clock.saved()
        return stop

    def _stopped(self, stop: str) -> dict:
        """Say why the run stopped; a log that could not be written is an error (the checkpoint is
        written)."""
        if stop == "preempted" and self.logs.error is not None:
            raise TrainError(
                f"{self.logs.error}; checkpoint {self.run_dir / 'checkpoints' / f'step_{self.step:08d}'} "
                "written (it holds the lines not written): free some space, then continue with "
                "--resume auto"
            )
        if stop == "preempted":
            self.stopped_by = self.preemption.signal_name or "SIGTERM"
            self.logs.log(
                f"{'interrupted' if self.stopped_by == 'SIGINT' else 'preempted'} at step {self.step} "
                f"({self.stopped_by}): checkpoint written; continue with --resume auto"
            )
        if stop == "patience":
            self.logs.log(
                f"early stopping: {self.since_best} validations without a better valid "
                f"{self.cfg.best_metric} "
                f"(train.patience={self.cfg.patience}); the best is step {self.best_step}, in "
                f"{self.run_dir / 'checkpoints' / 'best'}"
            )
        self.logs.log(
            f"stopped ({stop}) at step {self.step}, epoch {self.epoch}, {self.elapsed / 60:.1f} min"
        )
        return {}

    def start_decay(self) -> None:
        """Fix the updates of the final linear decay (train.decay_fraction) after update self.step
        (`stopping.decay_window`)."""
        self.decay_start, self.decay_end = stopping.decay_window(self.cfg, self.step)
        self.logs.log(
            f"learning-rate decay: linear from update {self.decay_start} to {self.decay_end} "
            f"(decay_fraction {self.cfg.decay_fraction})"
        )

    # -- one update: batches -> loss -> backward -> clip -> Adam step at eq. 3's rate
    def micro_batches(self):
        """The micro-batches of this rank across epochs (the sampler knows the position of the next)."""
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
        """The label-smoothed loss and nll sums of ``batch`` (5.4) and its target tokens."""
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
        on all ranks. Returns its loss and nll per target token, rate, gradient norm and tokens."""
        self.model.train()
        sums = self._backward(micro, total_tokens)  # (loss, nll) sums of the update, read once
        lr = self.learning_rate(self.step + 1)
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
        self._check_finite(sums[0].item(), float(grad_norm))
        return {
            "loss": sums[0].item() / total_tokens,
            "nll": sums[1].item() / total_tokens,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "tokens": total_tokens,
        }

    def _check_finite(self, loss_sum: float, grad_norm: float) -> None:
        """A NaN or infinite loss or gradient (the same on every rank: both are all-reduced) has made
        the weights NaN: stop before a checkpoint keeps them (nmt refuses to load them, and keep_last
        would delete the good ones). fp16's loss scaling skips such updates itself."""
        if self.scaler is None and not (math.isfinite(loss_sum) and math.isfinite(grad_norm)):
            raise TrainError(
                f"training diverged at update {self.step} (loss sum {loss_sum}, gradient norm {grad_norm}): "
                "stopped without saving it; the checkpoints written before it are intact (continue with "
                "--resume and a lower --train.lr_scale, a longer --train.warmup_steps or --train.clip_norm)"
            )

    def _backward(self, micro: list[Batch], total_tokens: float) -> torch.Tensor:
        """Accumulate the gradient of the update's loss sum / ``total_tokens`` over the micro-batches
        (DDP's all-reduce after the last); returns this rank's (loss, nll) sums."""
        # DDP averages gradients over ranks; multiply by world so the result is d(sum)/total
        scale = self.world / total_tokens
        sums = torch.zeros(2, device=self.device)  # (loss, nll)
        model = self.ddp or self.model
        for i, batch in enumerate(micro):
            sync = self.ddp is None or i == len(micro) - 1
            ctx = self.ddp.no_sync() if not sync else contextlib.nullcontext()
            with ctx, self.coll.guard("the gradient all-reduce") if sync else contextlib.nullcontext():
                loss, nll, _ = self.forward_loss(model, batch)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            sums += torch.stack([loss.detach(), nll.detach()])
        return sums

    def learning_rate(self, update: int) -> float:
        """Eq. 3 at ``update`` (times train.lr_scale), times the final linear decay once it started."""
        lr = inverse_sqrt_lr(
            update,
            d_model=self.model_cfg.d_model,
            warmup_steps=self.cfg.warmup_steps,
            lr_scale=self.cfg.lr_scale,
        )
        lr *= linear_decay(update, decay_start=self.decay_start, decay_end=self.decay_end)
        return lr

    # -- validation
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

    def validate_and_keep_best(self) -> None:
        """Validate (rank 0), save a step checkpoint, copy it to ``best`` when it improves, then delete
        the step checkpoints past keep_last (`checkpointing.keep_best`: a kill at any point loses no
        best model). A stop signal ends the validation at once: the checkpoint is saved with its
        validation pending, which a resume does first (as the uninterrupted run did)."""
        result, interrupted = self._validate_until_signal()
        try:
            checkpointing.keep_best(self, result, interrupted=interrupted)
        except RunDirError as e:
            raise TrainError(str(e)) from None

    def _validate_until_signal(self) -> tuple[dict | None, bool]:
        """Rank 0's validation result (None on the other ranks, or without a valid split), and whether
        a stop signal interrupted it."""
        result = None
        if not (self.is_main and self.valid_set is not None):
            return result, False
        try:
            with self.preemption.interruptible():
                result = self.validate()
        except distributed.Interrupted:
            return result, True
        return result, False

    # -- checkpoints (`checkpointing.py`)
    def save(self, *, rotate: bool = True) -> Path:
        """Write checkpoint step_N (collective); ``rotate``: then delete those past keep_last."""
        try:
            return checkpointing.save(self, rotate=rotate)
        except RunDirError as e:
            raise TrainError(str(e)) from None

    def _save_on_stop(self) -> None:
        """The checkpoint of a run stopped by a signal or a log it cannot write."""
        try:
            self.save()
        except TrainError as e:
            if self.logs.error is None:
                raise
            raise TrainError(
                f"{self.logs.error}, and {e}: free some space, then continue with --resume auto"
            ) from None

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

    def _prepare_run_dir(self, resume: bool, *, fall_back: bool) -> None:
        """Own RUN_DIR, then start or resume it (`checkpointing`); the lock is released if that fails."""
        created = not self.run_dir.exists()
        try:
            stale = checkpointing.own(self)
        except RunDirError as e:
            raise TrainError(str(e)) from None
        try:
            checkpointing.start_or_resume(self, resume, fall_back=fall_back, stale=stale)
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
