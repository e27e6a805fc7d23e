"""`nmt train`: the paper's training (section 5) in one straight loop.

Per optimizer step: take ``accum`` micro-batches (each <= max_tokens padded tokens per side) so that
about ``update_tokens`` target tokens are seen (5.1), count the target tokens of the whole update
across ranks, backpropagate the label-smoothed loss sum divided by that count (5.4), set the
learning rate of eq. 3 (5.3), Adam step, log, validate, checkpoint.

Run under ``torchrun --nproc_per_node=K -m nmt train ...`` for DistributedDataParallel (gloo on CPU,
nccl on CUDA); rank 0 writes checkpoints and logs. Every stop/save/validate decision is taken once per
update for the whole job (`distributed.py`); SIGTERM checkpoints at the next update and exits 0.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import itertools
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from .. import checkpoint as ckpt
from ..data.batching import Batch, TokenBatchSampler, collate
from ..config import (ConfigError, ModelConfig, TrainConfig, apply_overrides, from_dict, load_raw,
                     preset, to_dict, train_preset)
from ..data.prepare import ParallelDataset, load_meta
from . import distributed
from .loss import label_smoothed_nll_loss
from ..model import Transformer
from .optim import build_adam, inverse_sqrt_lr, set_lr
from ..precision import autocast, resolve as resolve_precision


class TrainError(Exception):
    """A problem the user must fix before (or while) training; the message says which."""


# ----------------------------------------------------------------------------- configuration
def build_configs(data_dir: Path, *, preset_name: str | None, config_file: str | None,
                  overrides: dict) -> tuple[ModelConfig, TrainConfig, dict]:
    meta = load_meta(data_dir)  # raises a clear error when DATA_DIR is not prepared
    vocab = int(meta["vocab_size"])
    raw = load_raw(config_file) if config_file else {}
    name = preset_name or raw.get("preset") or "base"
    model_cfg = preset(name, vocab)
    train_cfg = train_preset(name)
    if "model" in raw:
        model_cfg = apply_overrides(model_cfg, raw["model"], section="model")
    if "train" in raw:
        train_cfg = apply_overrides(train_cfg, raw["train"], section="train")
    unknown = sorted(set(overrides) - {"model", "train"})
    if unknown:
        raise ConfigError(f"--{unknown[0]}.*: unknown section; overrides are --model.* and --train.*")
    model_cfg = apply_overrides(model_cfg, overrides.get("model", {}), section="model")
    train_cfg = apply_overrides(train_cfg, overrides.get("train", {}), section="train")
    if model_cfg.src_vocab_size != vocab or model_cfg.tgt_vocab_size != vocab:
        raise ConfigError(f"model.src_vocab_size/tgt_vocab_size = {model_cfg.src_vocab_size}/"
                          f"{model_cfg.tgt_vocab_size} do not match the vocabulary of {data_dir} "
                          f"({vocab} pieces, meta.json)")
    return model_cfg, train_cfg, meta


# ----------------------------------------------------------------------------- state helpers
def _b64(t: torch.Tensor) -> str:
    return base64.b64encode(t.numpy().tobytes()).decode()


def _unb64(s: str) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(base64.b64decode(s), dtype=np.uint8).copy())


def rng_state() -> dict:
    state = {"torch": _b64(torch.get_rng_state())}
    if torch.cuda.is_available():
        state["cuda"] = [_b64(s) for s in torch.cuda.get_rng_state_all()]
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(_unb64(state["torch"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([_unb64(s) for s in state["cuda"]])


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """Adam state as flat named tensors (safetensors) plus JSON-able param_groups."""
    sd = optimizer.state_dict()
    tensors = {f"{idx}.{key}": value for idx, st in sd["state"].items() for key, value in st.items()}
    return tensors, {"param_groups": sd["param_groups"]}


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    state: dict[int, dict] = {}
    for name, value in tensors.items():
        idx, key = name.split(".", 1)
        state.setdefault(int(idx), {})[key] = value
    groups = meta["param_groups"]
    for g in groups:
        g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})


# ----------------------------------------------------------------------------- the loop
class Trainer:
    def __init__(self, data_dir: Path, run_dir: Path, model_cfg: ModelConfig, train_cfg: TrainConfig,
                 meta: dict, *, resume: bool, device: str | None = None, progress: bool = True,
                 restart: bool = False):
        self.data_dir, self.run_dir, self.meta = data_dir, run_dir, meta
        self.model_cfg, self.cfg = model_cfg, train_cfg
        topo = distributed.Topology.from_env()
        self.world, self.rank = topo.world, topo.rank
        self.is_main = self.rank == 0
        self.device = distributed.resolve_device(device, topo.local_rank)
        if (topo.launched or self.world > 1) and not dist.is_initialized():
            distributed.init_process_group(self.device, timeout_minutes=train_cfg.collective_timeout)
        self.coll = distributed.Collectives(device=self.device, rank=self.rank, world=self.world,
                                            active=dist.is_initialized(),
                                            timeout_minutes=train_cfg.collective_timeout)
        if train_cfg.num_threads:
            torch.set_num_threads(train_cfg.num_threads)
        self.amp_dtype, self.precision_note = resolve_precision(train_cfg.precision, self.device)
        self.progress = progress and self.is_main and sys.stderr.isatty()

        self.train_set = ParallelDataset.load(data_dir, "train")
        self.valid_set = ParallelDataset.load(data_dir, "valid") if "valid" in meta.get("splits", {"valid": 1}) else None
        self.sampler = TokenBatchSampler(src_lengths=self.train_set.src_lengths,
                                         tgt_lengths=self.train_set.tgt_lengths,
                                         max_tokens=train_cfg.max_tokens, seed=train_cfg.seed,
                                         num_replicas=self.world, rank=self.rank)
        self.accum = self._accumulation_steps()

        torch.manual_seed(train_cfg.seed)
        self.model = Transformer(model_cfg).to(self.device)
        self.ddp = None
        if self.coll.active:
            self.ddp = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.optimizer = build_adam(self.model.parameters(), betas=(train_cfg.adam_beta1, train_cfg.adam_beta2),
                                    eps=train_cfg.adam_eps, weight_decay=train_cfg.weight_decay)
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None
        self.step, self.epoch, self.position = 0, 0, 0
        self.best: float | None = None
        self.elapsed = 0.0
        self.tokens_seen = 0
        self.tb = None
        self._prepare_run_dir(resume, restart=restart)

    # -- set-up
    def _accumulation_steps(self) -> int:
        """Micro-batches per update so that world * accum * (mean target tokens per batch) ~ update_tokens.

        The mean is over the batches of all shards (summed across ranks), so every rank gets the same count."""
        if self.cfg.accum_steps:
            return self.cfg.accum_steps
        batches = self.sampler.batches(0)
        tgt = self.train_set.tgt_lengths
        tokens = sum(int(tgt[b].sum()) + len(b) for b in batches)  # target tokens incl. EOS
        tokens, n_batches = self.coll.sum([tokens, len(batches)], what="the accumulation count")
        mean_tokens = tokens / n_batches if n_batches else 1.0
        return max(1, round(self.cfg.update_tokens / (self.world * mean_tokens)))

    def _prepare_run_dir(self, resume: bool, *, restart: bool = False) -> None:
        config_path = self.run_dir / "config.json"
        if resume:
            last = ckpt.list_step_checkpoints(self.run_dir)
            if not last:
                raise TrainError(f"--resume: {self.run_dir} has no complete checkpoint to resume from")
            self._load(last[-1])
            return
        if self.run_dir.exists() and (config_path.exists() or ckpt.list_step_checkpoints(self.run_dir)) and not (
                restart and not ckpt.list_step_checkpoints(self.run_dir)):  # --resume auto: no checkpoint yet
            raise TrainError(f"{self.run_dir} already holds a run; use --resume to continue it or "
                             "choose another --out")
        self.coll.barrier(what="the run directory check")  # every rank has checked before rank 0 writes
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config_path.write_text(json.dumps(self.full_config(), indent=2) + "\n")
            free = shutil.disk_usage(self.run_dir).free
            need = 4 * sum(p.numel() for p in self.model.parameters()) * 3 * 2  # weights + 2 moments, x2
            if free < need:
                raise TrainError(f"{self.run_dir}: only {free / 1e6:.0f} MB free, a checkpoint needs "
                                 f"about {need / 2e6:.0f} MB (x2 while it is written)")

    def full_config(self) -> dict:
        return {"model": to_dict(self.model_cfg), "train": to_dict(self.cfg), "data": self.meta,
                "data_dir": str(self.data_dir)}

    def _load(self, directory: Path) -> None:
        ckpt.verify(directory)
        ckpt.load_weights(self.model, ckpt.load_state(directory), source=str(directory))
        from safetensors.torch import load_file
        load_optimizer(self.optimizer, load_file(str(directory / "optimizer.safetensors")),
                       json.loads((directory / "optimizer.json").read_text()))
        state = json.loads((directory / "trainer_state.json").read_text())
        if state.get("world_size", 1) != self.world:
            raise TrainError(f"{directory}: saved with {state.get('world_size', 1)} processes; resume "
                             f"with the same number (now {self.world}) for an exact continuation")
        self.step, self.epoch, self.position = state["step"], state["epoch"], state["position"]
        if "positions" in state:  # every rank's data position (equal by construction; checked)
            self.epoch, self.position = state["positions"][self.rank]
        self.best, self.elapsed, self.tokens_seen = state["best"], state["elapsed"], state["tokens_seen"]
        set_rng_state(state["rng"][self.rank] if isinstance(state["rng"], list) else state["rng"])
        self.log(f"resumed from {directory} at step {self.step} (epoch {self.epoch}, batch {self.position})")

    # -- logging
    def log(self, message: str) -> None:
        if self.is_main:
            print(message, file=sys.stderr, flush=True)
            with open(self.run_dir / "train.log", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")

    def metric(self, record: dict) -> None:
        if self.is_main:
            with open(self.run_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            if self.tb is not None:
                for k, v in record.items():
                    if isinstance(v, (int, float)) and k != "step":
                        self.tb.add_scalar(f"{record.get('split', 'train')}/{k}", v, record["step"])

    # -- data stream: micro-batches across epochs, with the position of the next one
    def micro_batches(self):
        while True:
            if self.cfg.max_epochs and self.epoch >= self.cfg.max_epochs:
                return
            batches = self.sampler.batches(self.epoch)
            while self.position < len(batches):
                indices = batches[self.position]
                self.position += 1
                yield collate([self.train_set[i] for i in indices])
            self.epoch, self.position = self.epoch + 1, 0

    def forward_loss(self, model, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, int]:
        batch = batch.to(self.device)
        with autocast(self.device, self.amp_dtype):
            logits = model(batch.src, batch.tgt_in)  # (B, T, W)
        return label_smoothed_nll_loss(logits, batch.tgt_out, epsilon=self.cfg.label_smoothing,
                                       kind=self.cfg.label_smoothing_kind)  # ignores nmt.vocab.PAD

    def train_step(self, micro: list[Batch], total_tokens: float) -> dict:
        """One update on this rank's ``micro``-batches; ``total_tokens``: target tokens of the update on all ranks."""
        self.model.train()
        # DDP averages gradients over ranks; multiply by world so the result is d(sum)/total
        scale = self.world / total_tokens
        sums = torch.zeros(2, device=self.device)  # (loss, nll) sums of the update, read once
        model = self.ddp or self.model
        for i, batch in enumerate(micro):
            sync = self.ddp is None or i == len(micro) - 1
            ctx = self.ddp.no_sync() if not sync else contextlib.nullcontext()
            with ctx, (self.coll.guard("the gradient all-reduce") if sync else contextlib.nullcontext()):
                loss, nll, _ = self.forward_loss(model, batch)
                scaled = loss * scale
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            sums += torch.stack([loss.detach(), nll.detach()])
        lr = inverse_sqrt_lr(self.step + 1, d_model=self.model_cfg.d_model,
                             warmup_steps=self.cfg.warmup_steps, lr_scale=self.cfg.lr_scale)
        set_lr(self.optimizer, lr)
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.cfg.clip_norm if self.cfg.clip_norm > 0 else float("inf"))
        if self.scaler:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.coll.sum_(sums, what="the loss all-reduce")
        return {"loss": sums[0].item() / total_tokens, "nll": sums[1].item() / total_tokens,
                "lr": lr, "grad_norm": float(grad_norm), "tokens": total_tokens}

    @torch.no_grad()
    def validate(self) -> dict:
        self.model.eval()
        sampler = TokenBatchSampler(src_lengths=self.valid_set.src_lengths, tgt_lengths=self.valid_set.tgt_lengths,
                                    max_tokens=self.cfg.max_tokens, shuffle=False)
        loss_sum = nll_sum = tokens = 0.0
        for indices in sampler.batches(0):
            loss, nll, n = self.forward_loss(self.model, collate([self.valid_set[i] for i in indices]))
            loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + n
        out = {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50))}
        if self.cfg.valid_bleu:
            out.update(self.validate_bleu())
        return out

    def validate_bleu(self) -> dict:
        from ..infer.translate import bleu_on_split
        return bleu_on_split(self.model, self.data_dir, "valid", beam=self.cfg.valid_bleu_beam,
                             max_sentences=self.cfg.valid_bleu_max_sentences, device=self.device,
                             amp_dtype=self.amp_dtype)

    def save(self) -> Path:
        directory = self.run_dir / "checkpoints" / f"step_{self.step:08d}"
        ranks = self.coll.gather_objects({"rng": rng_state(), "position": [self.epoch, self.position]},
                                         what="gathering RNG states and data positions for the checkpoint")
        rngs = [r["rng"] for r in ranks]
        if self.is_main:
            tensors, meta = optimizer_tensors(self.optimizer)
            state = {"step": self.step, "epoch": self.epoch, "position": self.position, "best": self.best,
                     "elapsed": self.elapsed, "tokens_seen": self.tokens_seen, "world_size": self.world,
                     "accum": self.accum, "rng": rngs if self.world > 1 else rngs[0],
                     "positions": [r["position"] for r in ranks]}
            try:
                ckpt.save(directory, model=self.model, config=self.full_config(),
                          spm_model=self.data_dir / "spm.model", trainer_state=state,
                          optimizer_tensors=tensors, optimizer_meta=meta)
            except OSError as e:
                raise TrainError(f"could not write checkpoint {directory}: {e.strerror or e} "
                                 "(the previous checkpoints are intact)") from e
            for old in ckpt.list_step_checkpoints(self.run_dir)[:-self.cfg.keep_last]:
                shutil.rmtree(old, ignore_errors=True)
        self.coll.barrier(what="the barrier after writing a checkpoint")
        return directory

    def run(self) -> dict:
        """Train until a limit, the end of the data (max_epochs) or SIGTERM; returns the last train record."""
        with distributed.Preemption() as self.preemption:
            return self._loop()

    def _loop(self) -> dict:
        cfg = self.cfg
        if self.is_main:
            try:
                from torch.utils.tensorboard import SummaryWriter
                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception:  # tensorboard not installed: metrics.jsonl is enough
                self.tb = None
        n_params = sum(p.numel() for p in self.model.parameters())
        self.log(f"model: {n_params:,} parameters; precision: {self.precision_note}; device: {self.device}; "
                 f"world size {self.world}; {self.accum} micro-batch(es) of <= {cfg.max_tokens} tokens per update "
                 f"(~{cfg.update_tokens} target tokens)")
        stream = self.micro_batches()
        start, last_save = time.time() - self.elapsed, time.time()
        bar = None
        if self.progress:
            from tqdm import tqdm
            if cfg.max_time:  # the time limit binds: the bar (and its ETA) counts training seconds
                bar = tqdm(total=round(cfg.max_time * 60), initial=round(self.elapsed), unit="s",
                           dynamic_ncols=True, desc="train")
            else:
                bar = tqdm(total=cfg.max_steps or None, initial=self.step, unit="step", dynamic_ncols=True,
                           desc="train")
        window_tokens, window_start, last = 0, time.time(), {}
        window_loss = window_nll = 0.0  # token-weighted sums since the last log line
        stop = None
        while stop is None:
            self.coll.step = self.step + 1
            micro = list(itertools.islice(stream, self.accum))
            # one all-reduce: the update's target tokens, and whether some rank's data has ended
            total_tokens, exhausted = self.coll.sum([sum(b.n_tgt_tokens for b in micro), not micro],
                                                    what="the token count all-reduce")
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
                last = {"split": "train", "step": self.step, "epoch": self.epoch, "loss": loss,
                        "nll": nll, "ppl": math.exp(min(nll, 50)), "lr": stats["lr"],
                        "grad_norm": stats["grad_norm"], "tgt_tokens_per_s": rate, "elapsed": self.elapsed}
                self.metric(last)
                if bar is not None:
                    bar.set_postfix(step=self.step, loss=f"{loss:.3f}", lr=f"{stats['lr']:.2e}",
                                    tok_s=f"{rate:.0f}")
            if bar is not None:
                bar.update(round(self.elapsed) - bar.n if cfg.max_time else 1)
            # one decision for the whole job: rank 0's counters and clock, any rank's SIGTERM
            decision = self.coll.decide(distributed.local_decision(
                step=self.step, elapsed=self.elapsed, since_save=time.time() - last_save,
                max_steps=cfg.max_steps, max_time=cfg.max_time, save_every_steps=cfg.save_every_steps,
                save_every_minutes=cfg.save_every_minutes, valid_every_steps=cfg.valid_every_steps),
                preempted=self.preemption.requested)
            stop = decision.stop
            if stop == "preempted":  # the scheduler's grace period is short: checkpoint, no validation
                self.save()
            elif stop or decision.validate:
                self.validate_and_keep_best(stop is not None)
                last_save = time.time()
            elif decision.save:
                self.save()
                last_save = time.time()
        if bar is not None:
            bar.close()
        if stop == "max_epochs":
            self.validate_and_keep_best(True)
        if stop == "preempted":
            self.log(f"preempted at step {self.step} (SIGTERM): checkpoint written; continue with --resume auto")
        self.log(f"stopped ({stop}) at step {self.step}, epoch {self.epoch}, {self.elapsed / 60:.1f} min")
        if self.tb is not None:
            self.tb.close()
        return last

    def validate_and_keep_best(self, final: bool) -> None:
        """Save a step checkpoint; on rank 0 validate it and copy it to ``best`` when it improves."""
        result, improved = None, False
        if self.is_main and self.valid_set is not None:
            result = self.validate()
            score = -result["bleu"] if self.cfg.best_metric == "bleu" else result["loss"]  # lower is better
            improved = self.best is None or score < self.best
            if improved:
                self.best = score
            record = {"split": "valid", "step": self.step, "epoch": self.epoch, **result}
            self.metric(record)
            self.log("valid step {}: {}{}".format(self.step, ", ".join(
                f"{k} {v:.4g}" for k, v in result.items() if isinstance(v, float)), " (best)" if improved else ""))
        if self.world > 1:
            shared = [self.best]
            dist.broadcast_object_list(shared, src=0)
            self.best = shared[0]
        directory = self.save()
        if improved:
            best_dir = self.run_dir / "checkpoints" / "best"
            tmp = self.run_dir / "checkpoints" / ".best.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(directory, tmp)
            if best_dir.exists():
                shutil.rmtree(best_dir)
            os.rename(tmp, best_dir)


# ----------------------------------------------------------------------------- CLI
def add_train_args(parser) -> None:
    parser.add_argument("data_dir", help="a directory written by `nmt prepare`")
    parser.add_argument("--out", required=True, help="run directory (checkpoints, logs, metrics.jsonl)")
    parser.add_argument("--preset", choices=["base", "big", "small", "tiny"],
                        help="model and training defaults (default: base, or the config file's preset:)")
    parser.add_argument("--config", help="YAML/JSON with model: and train: sections (and optional preset:)")
    parser.add_argument("--resume", nargs="?", const="strict", choices=["strict", "auto"], default=None,
                        help="continue RUN_DIR from its last checkpoint; `--resume auto`: continue if RUN_DIR "
                             "has one, else start fresh (for preemptible jobs: re-run the same command)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda if available)")


def run_train(args, overrides: dict) -> int:
    data_dir, run_dir = Path(args.data_dir), Path(args.out)
    restart = args.resume == "auto" and not ckpt.list_step_checkpoints(run_dir)  # auto, nothing to resume
    resume = bool(args.resume) and not restart
    if resume and (run_dir / "config.json").exists():
        saved = json.loads((run_dir / "config.json").read_text())
        model_cfg = from_dict(ModelConfig, saved["model"], section="model")
        train_cfg = apply_overrides(from_dict(TrainConfig, saved["train"], section="train"),
                                    overrides.get("train", {}), section="train")
        meta = load_meta(data_dir)
        if int(meta["vocab_size"]) != model_cfg.tgt_vocab_size:
            raise ConfigError(f"{data_dir}: vocabulary {meta['vocab_size']} does not match the run's model "
                              f"({model_cfg.tgt_vocab_size})")
    else:
        model_cfg, train_cfg, meta = build_configs(data_dir, preset_name=args.preset,
                                                   config_file=args.config, overrides=overrides)
    try:
        trainer = Trainer(data_dir, run_dir, model_cfg, train_cfg, meta, resume=resume, device=args.device,
                          restart=restart)
        trainer.run()
    except distributed.DistributedError as e:
        raise TrainError(str(e)) from None
    if dist.is_initialized():
        trainer.coll.barrier(what="the barrier at the end of training")  # no rank tears down while another works
        dist.destroy_process_group()
    return 0


def add_average_args(parser) -> None:
    parser.add_argument("run_dir", help="a run directory with checkpoints/step_*")
    parser.add_argument("--last", type=int, default=5, help="how many of the last checkpoints (paper: 5 base, 20 big)")
    parser.add_argument("--out", required=True, help="where to write the averaged checkpoint")


def run_average(args, overrides: dict) -> int:
    steps = ckpt.list_step_checkpoints(args.run_dir)
    if len(steps) < args.last:
        raise TrainError(f"{args.run_dir}: {len(steps)} checkpoints, fewer than --last {args.last}")
    chosen = steps[-args.last:]
    averaged = ckpt.average(chosen)
    config = ckpt.read_config(chosen[-1])
    model = Transformer(from_dict(ModelConfig, config["model"], section="model"))
    ckpt.load_weights(model, averaged, source="average")
    config["averaged_from"] = [p.name for p in chosen]
    ckpt.save(args.out, model=model, config=config, spm_model=chosen[-1] / "spm.model")
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {args.out}")
    return 0
