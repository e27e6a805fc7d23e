"""`nmt train`: the paper's training (section 5) in one straight loop (`Trainer._loop`).

Per update (`Trainer.train_step`): take ``accum`` micro-batches (each <= max_tokens padded tokens per
side) so that about ``update_tokens`` target tokens are seen (5.1), count the target tokens of the
whole update across ranks, backpropagate the label-smoothed loss sum divided by that count (5.4), clip
(train.clip_norm; the paper does not), Adam at the rate of `optim.Schedule` (eq. 3, 5.3). Then log,
and one decision for the whole job (`stopping.py`): validate (keeping the best), checkpoint, or stop.

Run under ``torchrun --nproc_per_node=K -m nmt train ...`` for DistributedDataParallel (gloo on CPU,
nccl on CUDA); rank 0 writes checkpoints (`run_checkpoints.RunState`) and logs (`run_log.py`). SIGTERM
(exit 0) and Ctrl-C (exit 130) checkpoint at the next update, or at once during validation. RUN_DIR
has one owner (`run_dir.RunLock`); a crash loses no checkpoint and no best model (`Checkpoints.keep_best`,
`run_dir.mend_best`); a log that cannot be written (a full disk) stops the run with a checkpoint that
holds the unwritten lines.
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
from ..config import ConfigError, ModelConfig, TrainConfig
from ..data.batching import Batch, collate
from ..errors import UserError
from ..infer.options import SearchOptions
from ..model import Transformer
from ..parameter_counts import parameter_counts
from ..precision import autocast, resolve_precision
from ..vocab import PAD, UNK, load_spm
from . import distributed, stopping, validation
from .cpu_warning import cpu_warning, paper_sized
from .guard_valid import guard_scores
from .loss import fused_label_smoothed_nll_loss
from .optim import Schedule, build_adam, set_lr
from .run_checkpoints import Checkpoints, RunState, Start, run_config
from .run_data import RunData
from .run_dir import RunDirError
from .run_log import LossWindow, RunLog, TrainBar
from .state import Progress


class TrainError(UserError):
    """A problem the user must fix before (or while) training; the message says which."""


class Trainer:
    def __init__(
        self,
        data_dir: Path,
        run_dir: Path,
        model_cfg: ModelConfig,
        train_cfg: TrainConfig,
        meta: dict,
        start: Start = Start(),
        *,
        device: str | None = None,
        progress: bool = True,
    ):
        """A run of ``data_dir`` in ``run_dir``, started or resumed as ``start`` (`run_checkpoints.Start`)
        says; ``progress``: a progress bar on a terminal."""
        self.data_dir, self.run_dir, self.meta = data_dir, run_dir, meta
        self.model_cfg, self.cfg = model_cfg, train_cfg
        topo = distributed.Topology.from_env()
        self.world, self.rank, self.is_main = topo.world, topo.rank, topo.rank == 0
        try:
            self.device = distributed.train_device(device, topo.local_rank)
        except distributed.DeviceError as e:
            raise TrainError(str(e)) from None
        if self.device.type == "cpu":
            keep_freed_memory()  # no page faults for large tensors every step (nmt/allocator.py)
        self.coll = distributed.join_job(topo, self.device, timeout_minutes=train_cfg.collective_timeout)
        if train_cfg.num_threads:
            torch.set_num_threads(train_cfg.num_threads)
        try:
            self.amp_dtype, self.precision_note = resolve_precision(train_cfg.precision, self.device)
        except ValueError as e:
            raise ConfigError(f"train.{e}") from None
        self.show_bar = progress and self.is_main and sys.stderr.isatty()
        self.replay, self.guard = start.replay, start.guard  # fine-tuning: general data replayed, guarded
        self._load_data()
        self._build_model()
        self.state = RunState(  # what a checkpoint holds
            model=self.model,
            optimizer=self.optimizer,
            sampler=self.sampler,  # the data position
            progress=Progress(best_metric=train_cfg.best_metric),  # how far the run is
            schedule=Schedule.of(model_cfg, train_cfg),  # eq. 3 and the final decay
            accum=self.accum,
        )
        init = start.init
        self.init_record = init.record() if init is not None else None  # where the weights started
        self.logs = RunLog(run_dir, enabled=self.is_main)  # train.log, metrics.jsonl, tensorboard
        self.checkpoints = Checkpoints(  # RUN_DIR's: where, who writes
            run_dir,
            coll=self.coll,
            logs=self.logs,
            keep_last=train_cfg.keep_last,
            spm_model=data_dir / "spm.model",
            guard_drop=None if self.guard is None else self.guard.bleu_drop,
        )
        self.preemption = distributed.Preemption()  # entered by run()
        self.stopped_by: str | None = None  # "SIGTERM" / "SIGINT" when a signal stopped the run
        self._prepare_run_dir(start)

    # -- set-up
    def _load_data(self) -> None:
        """The train and valid data (`run_data.RunData`), this rank's sampler, the accumulation count."""
        self.data = RunData.load(
            self.data_dir,
            self.meta,
            self.cfg,
            coll=self.coll,
            right_to_left=self.model_cfg.right_to_left,
            replay=self.replay,
        )
        self.sampler, self.valid_set = self.data.sampler, self.data.valid_set
        if self.guard is not None and self.valid_set is None:
            raise TrainError(
                f"--guard-valid: {self.data_dir} has no valid pairs; the guard keeps the best valid "
                "checkpoint of those that stay within it (prepare with --valid SRC TGT)"
            )
        self.accum = self.data.accumulation_steps(self.cfg, self.coll)

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
    def progress(self) -> Progress:
        return self.state.progress

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
        if not self._validate_start():
            return {}
        progress = self.progress
        stream, clock = self.data.micro_batches(self.cfg), stopping.Clock(progress.elapsed)
        bar = TrainBar(
            enabled=self.show_bar,
            max_steps=self.cfg.max_steps,
            max_time=self.cfg.max_time,
            update=progress.update,
            elapsed=progress.elapsed,
        )
        window, last, stop = LossWindow(), {}, None
        first, started = progress.update + 1, progress.elapsed  # the first update is timed (`_warn_on_cpu`)
        while stop is None:
            self.coll.update = progress.update + 1
            micro = list(itertools.islice(stream, self.accum))
            # one all-reduce: the update's target tokens, and whether some rank's data has ended
            total_tokens, exhausted = self.coll.sum(
                [sum(b.n_tgt_tokens for b in micro), not micro], what="the token count all-reduce"
            )
            if exhausted:  # max_epochs: every rank stops at the same update
                stop = "max_epochs"
                break
            stats = self.train_step(micro, total_tokens)
            progress.tokens_seen += int(stats["tokens"])
            progress.elapsed = clock.elapsed()
            if progress.update == first:
                self._warn_on_cpu(progress.elapsed - started, tokens=int(stats["tokens"]))
            window.add(stats)
            last = self._report(stats, window, bar) or last
            stop = self._after_update(clock)
        bar.close()
        if stop == "max_epochs":  # the data has ended: validate (and checkpoint) the last update
            self.validate_and_keep_best()
            stop = stopping.stops_after_validation(self.cfg, stopping.Decision(stop, False, True), progress)
        self._stopped(stop)
        return last

    def _ready(self) -> bool:
        """Whether the loop may start: a log that cannot be written is an error; a validation that a
        stop signal interrupted is done first (as the uninterrupted run did); a resumed run that
        already reached its limit does nothing (training past it changes the run)."""
        if self.logs.error:
            raise TrainError(
                f"{self.logs.error}: nothing trained since step {self.progress.update}, nothing lost (free "
                "some space, then run again)"
            )
        if self.progress.validation_pending:
            self.logs.log(f"validating step {self.progress.update} (its validation was interrupted)")
            self.validate_and_keep_best()
            if self.progress.validation_pending:
                self._stopped("preempted")
                return False
        done = stopping.reached(self.cfg, self.state.schedule, self.progress, epoch=self.epoch)
        if done:
            self.logs.log(
                f"{self.run_dir}: the run already finished at update {self.progress.update} ({done}); "
                "nothing to do (raise the limit with --train.* to train further)"
            )
            return False
        return True

    def _validate_start(self) -> bool:
        """With a guard (--guard-valid), validate the model a run starts from (update 0) once: its
        guard BLEU is the start the best checkpoint must stay near. False when a stop signal cut
        that validation short (the checkpoint is written, its validation pending)."""
        if self.guard is None or self.state.guard_start is not None or self.progress.update:
            return True
        self.logs.log("validating the model the run starts from (update 0): the guard's start")
        self.validate_and_keep_best()
        if self.progress.validation_pending:
            self._stopped("preempted")
            return False
        return True

    def _announce(self) -> None:
        """What the run trains, on what, how (train.log), and its tensorboard."""
        cfg = self.cfg
        for warning in self.data.warnings(self.data_dir, max_positions=self.model_cfg.max_positions):
            self.logs.log(warning)
        self.logs.open_tensorboard()
        n_params = sum(p.numel() for p in self.model.parameters())
        self.logs.log(
            f"model: {n_params:,} parameters; precision: {self.precision_note}; device: {self.device}; "
            f"world size {self.world}{f' ({dist.get_backend()})' if self.coll.active else ''}; "
            f"{self.accum} micro-batch(es) of <= {cfg.max_tokens} tokens per update "
            f"(~{cfg.update_tokens} target tokens)"
        )
        if len(self.data.train_sets) > 1:
            self.logs.log(self.data.segmentations_note(self.meta))
        for note in (self.replay and self.data.replay_note(self.replay), self.guard and self.guard.note()):
            if note:
                self.logs.log(note)

    def _warn_on_cpu(self, seconds: float, *, tokens: int) -> None:
        """A paper-sized model on the CPU: the measured time of the first update, projected to the run."""
        counts = parameter_counts(self.model)
        if self.device.type == "cpu" and paper_sized(counts["encoder"] + counts["decoder"]):
            self.logs.log(
                cpu_warning(
                    cfg=self.cfg, seconds_per_update=seconds, update=self.progress.update, tokens=tokens
                )
            )

    def _report(self, stats: dict, window: LossWindow, bar: TrainBar) -> dict | None:
        """The train record (metrics.jsonl) of the first update and of every log_every_steps-th (None
        for the other updates); the progress bar moves on."""
        record, update, elapsed = None, self.progress.update, self.progress.elapsed
        if update % self.cfg.log_every_steps == 0 or update == 1:
            record = window.record(stats, update=update, epoch=self.epoch, elapsed=elapsed)
            self.logs.metric(record)
        bar.advance(record, elapsed=elapsed)
        return record

    def _after_update(self, clock: stopping.Clock) -> str | None:
        """One decision for the whole job (`stopping.after_update`), then what it says: start the
        decay; on a signal checkpoint at once; validate and keep the best (then maybe stop early); or
        checkpoint. Returns why the run stops, or None."""
        decision = stopping.after_update(
            self.cfg,
            self.state.schedule,
            self.coll,
            progress=self.progress,
            clock=clock,
            preempted=self.preemption.requested or self.logs.error is not None,
        )
        if decision.decay:
            self.state.schedule.start_decay(self.progress.update)
            self.logs.log(
                f"learning-rate decay: linear from update {self.state.schedule.decay_start} to "
                f"{self.state.schedule.decay_end} (decay_fraction {self.cfg.decay_fraction})"
            )
        if decision.stop == "preempted":  # the scheduler's grace period is short: checkpoint, no validation
            # done first on resume, as this run would have done it now
            self.progress.validation_pending = decision.validate and self.valid_set is not None
            self._save_on_stop()
            return decision.stop
        if decision.stop or decision.validate:
            self.validate_and_keep_best()
            clock.saved()
            return stopping.stops_after_validation(self.cfg, decision, self.progress)
        if decision.save:
            self.save()
            clock.saved()
        return None

    def _stopped(self, stop: str) -> None:
        """Say why the run stopped; a log that could not be written is an error (the checkpoint is
        written)."""
        progress, checkpoints = self.progress, self.run_dir / "checkpoints"
        if stop == "preempted" and self.logs.error is not None:
            raise TrainError(
                f"{self.logs.error}; checkpoint {checkpoints / f'step_{progress.update:08d}'} "
                "written (it holds the lines not written): free some space, then continue with "
                "--resume auto"
            )
        if stop == "preempted":
            self.stopped_by = self.preemption.signal_name or "SIGTERM"
            self.logs.log(
                f"{'interrupted' if self.stopped_by == 'SIGINT' else 'preempted'} at update "
                f"{progress.update} ({self.stopped_by}): checkpoint written; continue with --resume auto"
            )
        if stop == "patience":
            self.logs.log(
                f"early stopping: {progress.since_best} validations without a better valid "
                f"{self.cfg.best_metric} "
                f"(train.patience={self.cfg.patience}); the best is update {progress.best_step}, in "
                f"{checkpoints / 'best'}"
            )
        self.logs.log(
            f"stopped ({stop}) at update {progress.update}, epoch {self.epoch}, "
            f"{progress.elapsed / 60:.1f} min"
        )

    # -- one update: batches -> loss -> backward -> clip -> Adam step at eq. 3's rate
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
        lr = self.state.schedule.step_update(self.progress.update + 1)
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
        self.progress.update += 1
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
                f"training diverged at update {self.progress.update} (loss sum {loss_sum}, gradient "
                f"norm {grad_norm}): stopped without saving it; the checkpoints written before it are intact "
                "(continue with --resume and a lower --train.lr_scale, a longer --train.warmup_steps or "
                "--train.clip_norm)"
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

    # -- validation
    @torch.no_grad()
    def validate(self) -> dict:
        """The valid split's loss, nll and perplexity per target token, and with train.valid_bleu its BLEU."""
        self.model.eval()
        limit = self.model_cfg.max_positions  # longer pairs are truncated, as translation does
        out = validation.valid_loss(
            self.valid_set,
            max_tokens=self.cfg.max_tokens,
            batch_of=lambda indices: collate([self.data.pair(self.valid_set, i, limit) for i in indices]),
            loss_of=lambda batch: self.forward_loss(self.model, batch),
        )
        if self.cfg.valid_bleu:
            out.update(
                validation.bleu_on_split(
                    self.model,
                    self.data_dir,
                    "valid",
                    SearchOptions(beam=self.cfg.valid_bleu_beam),
                    max_sentences=self.cfg.valid_bleu_max_sentences,
                    device=self.device,
                    amp_dtype=self.amp_dtype,
                )
            )
        if self.guard is not None:
            out.update(
                guard_scores(
                    self.model,
                    self.guard,
                    SearchOptions(beam=self.cfg.valid_bleu_beam),
                    sp=load_spm(self.data_dir, side="target"),
                    max_sentences=self.cfg.valid_bleu_max_sentences,
                    device=self.device,
                    amp_dtype=self.amp_dtype,
                )
            )
        return out

    def validate_and_keep_best(self) -> None:
        """Validate (rank 0), save a step checkpoint, copy it to ``best`` when it improves, then delete
        the step checkpoints past keep_last (`Checkpoints.keep_best`: a kill at any point loses no
        best model). A stop signal ends the validation at once: the checkpoint is saved with its
        validation pending, which a resume does first (as the uninterrupted run did)."""
        result, self.progress.validation_pending = None, False  # rank 0 validates, if it can
        if self.is_main and self.valid_set is not None:
            result, self.progress.validation_pending = self.preemption.until_signal(self.validate)
        try:
            self.checkpoints.keep_best(
                self.state, result, config=self.full_config(), best_metric=self.cfg.best_metric
            )
        except RunDirError as e:
            raise TrainError(str(e)) from None
        if self.progress.validation_pending:
            self.logs.log(
                f"validation of step {self.progress.update} interrupted ({self.preemption.signal_name}): "
                "checkpoint written, its validation pending"
            )

    # -- checkpoints (`run_checkpoints.py`)
    def save(self, *, rotate: bool = True) -> Path:
        """Write checkpoint step_N (collective); ``rotate``: then delete those past keep_last."""
        try:
            return self.checkpoints.save(self.state, config=self.full_config(), rotate=rotate)
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
        """config.json: the model and train configurations, the data, where --init's weights started."""
        adaptation = {
            name: value.record() for name, value in (("replay", self.replay), ("guard", self.guard)) if value
        }
        return run_config(
            self.model_cfg,
            self.cfg,
            meta=self.meta,
            data_dir=self.data_dir,
            init=self.init_record,
            adaptation=adaptation,
        )

    def _prepare_run_dir(self, start: Start) -> None:
        """Own RUN_DIR, then start or resume it (`Checkpoints`); the lock is released if that fails."""
        created = not self.run_dir.exists()
        try:
            stale = self.checkpoints.own()
        except RunDirError as e:
            raise TrainError(str(e)) from None
        try:
            resumed = self.checkpoints.start_or_resume(
                self.state, config=self.full_config(), start=start, stale=stale
            )
        except RunDirError as e:
            self.release(remove_empty=created)
            raise TrainError(str(e)) from None
        except BaseException:
            self.release(remove_empty=created)
            raise
        if resumed is not None:
            self.state.progress = resumed.progress
            if resumed.config is not None:  # a fine-tuned run keeps saying where its weights started
                self.init_record = resumed.config.get("init")

    def release(self, *, remove_empty: bool = False) -> None:
        """Give up RUN_DIR (delete its lock file); ``remove_empty``: and the directory, if the lock
        file was all it held."""
        self.checkpoints.release(remove_empty=remove_empty)
