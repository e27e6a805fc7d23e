"""Batching by approximate length under a token budget (section 5.1 of the paper: "sentence pairs
were batched together by approximate sequence length. Each training batch contained a set of
sentence pairs containing approximately 25000 source tokens and 25000 target tokens").

Budget: a batch of n pairs costs n * max(src_len + 1) source and n * max(tgt_len + 1) target
positions (padded size; +1 for the EOS / BOS added by `collate`); both must be <= max_tokens.
The budget is per rank: with 8 GPUs and 25k tokens per step in total, use max_tokens ~ 3125
(or accumulate gradients).

Typical use:
    sampler = TokenBatchSampler(src_lengths=ds.src_lengths, tgt_lengths=ds.tgt_lengths,
                                max_tokens=4096, seed=1, num_replicas=world, rank=rank)
    loader = DataLoader(ds, batch_sampler=sampler, collate_fn=collate)
    sampler.set_epoch(epoch)  # or load_state_dict(saved) to resume mid-epoch

Translation batches with the same packer (`make_batches`: one side, longest first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from nmt.vocab import BOS, EOS, PAD


class EpochBatches:
    """Where a sampler is in its epochs, resumable: ``epoch`` and ``position`` (batches of the epoch
    already given), what ``batches(epoch)`` (each subclass's) yields from there. The samplers of
    training (TokenBatchSampler; nmt.train.replay.ReplaySampler) share it."""

    epoch: int = 0
    position: int = 0

    def batches(self, epoch: int) -> list[list[int]]:
        raise NotImplementedError

    def set_epoch(self, epoch: int) -> None:
        """Start `epoch` from its first batch."""
        self.epoch, self.position = epoch, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self.batches(self.epoch)[self.position :]:
            self.position += 1
            yield batch

    def __len__(self) -> int:
        """Batches left in the current epoch for this rank (what `__iter__` will yield)."""
        return len(self.batches(self.epoch)) - self.position


class TokenBatchSampler(EpochBatches):
    """Deterministic length-bucketed batches of example indices, shuffled per epoch.

    Per epoch (everything derived from `seed` and the epoch number, identical on every rank):
      1. order examples by (max(source, target) length, source length, target length); ties
         are broken by a seeded permutation (so batch composition varies between epochs) or by
         index if `shuffle=False`. The budget binds on the longer side, so the max comes first
         (on Multi30k at 4096 tokens: 4% padding, against 6.5% sorting by target then source);
      2. cut the ordered list greedily into batches within the token budget. An example that is
         over budget on its own gets a batch of its own (it is never dropped; `nmt prepare`
         already drops training pairs over --max-len);
      3. with several replicas, make the number of batches a multiple of `num_replicas` by
         splitting the batches with the most sentences in two halves (each half stays within
         budget). So every example is in exactly one batch of exactly one rank and all ranks get
         the same number of batches. Only if there are too few batches of >= 2 sentences to split
         (a tiny dataset) are batches repeated from the start of the list;
      4. shuffle the batch order (if `shuffle`) and give rank r the batches r, r + R, r + 2R, ...

    Several segmentations (BPE-dropout, `nmt prepare --bpe-dropout`): `src_lengths` and
    `tgt_lengths` may be [K, n] arrays, the lengths of the same n examples under K segmentations;
    epoch e is batched by row e mod K (the trainer reads that segmentation's ids: file
    `train.bpe{(e mod K) + 1}`).

    Resuming: `position` counts batches this sampler has yielded in the current epoch; iteration
    starts at `position`. When a DataLoader with workers prefetches, the sampler runs ahead of
    training, so save {"epoch": e, "position": batches actually trained on} from the training
    loop rather than `state_dict()` at an arbitrary moment.
    """

    def __init__(
        self,
        *,
        src_lengths: Sequence[int],
        tgt_lengths: Sequence[int],
        max_tokens: int,
        seed: int = 0,
        shuffle: bool = True,
        num_replicas: int = 1,
        rank: int = 0,
    ):
        self.src_lengths = np.asarray(src_lengths, dtype=np.int64)  # [n] or [K, n]
        self.tgt_lengths = np.asarray(tgt_lengths, dtype=np.int64)  # [n] or [K, n]
        if self.src_lengths.shape != self.tgt_lengths.shape or self.src_lengths.ndim not in (1, 2):
            raise ValueError(
                f"source lengths of shape {self.src_lengths.shape} but target "
                f"lengths of shape {self.tgt_lengths.shape}"
            )
        if self.src_lengths.ndim == 1:
            self.src_lengths, self.tgt_lengths = self.src_lengths[None], self.tgt_lengths[None]
        if len(self.src_lengths) > 1:  # K copies of a large corpus: half the memory
            self.src_lengths = self.src_lengths.astype(np.int32)
            self.tgt_lengths = self.tgt_lengths.astype(np.int32)
        if max_tokens < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"bad max_tokens={max_tokens} or rank={rank} of {num_replicas}")
        self.max_tokens, self.seed, self.shuffle = max_tokens, seed, shuffle
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of `epoch`, in order."""
        if self._cache is None or self._cache[0] != epoch:
            self._cache = (epoch, self._all_batches(epoch))
        return self._cache[1][self.rank :: self.num_replicas]

    def _all_batches(self, epoch: int) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, epoch])
        variant = epoch % len(self.src_lengths)
        src, tgt = self.src_lengths[variant], self.tgt_lengths[variant]  # [n] each
        n = len(src)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        longest = np.maximum(src, tgt)
        for key in (tgt, src, longest):  # last key = primary
            order = order[np.argsort(key[order], kind="stable")]
        batches = pack(order, src + 1, tgt + 1, max_tokens=self.max_tokens)
        batches = equalize(batches, self.num_replicas)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def pack(
    order: np.ndarray,
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    *,
    max_tokens: int,
    max_sentences: int | None = None,
) -> list[list[int]]:
    """Cut `order` greedily into consecutive batches with n * max(size) <= max_tokens per side
    (and at most `max_sentences` examples, if given).

    Sizes are the padded-tensor lengths (pieces + 1). An example over budget alone gets its
    own batch.
    """
    batches, batch = [], []
    max_s = max_t = 0
    for i, s, t in zip(order.tolist(), src_sizes[order].tolist(), tgt_sizes[order].tolist()):
        new_s, new_t = max(max_s, s), max(max_t, t)
        full = max_sentences is not None and len(batch) >= max_sentences
        if batch and (full or (len(batch) + 1) * max(new_s, new_t) > max_tokens):
            batches.append(batch)
            batch, new_s, new_t = [], s, t
        batch.append(i)
        max_s, max_t = new_s, new_t
    if batch:
        batches.append(batch)
    return batches


def make_batches(
    lengths: Sequence[int], *, batch_tokens: int, max_sentences: int | None = None
) -> list[list[int]]:
    """Translation's batches (one side): indices longest first (ties in input order), cut by
    `pack` so that each batch holds at most `batch_tokens` padded tokens (n * longest) and
    `max_sentences` sentences (always at least one). `lengths` are padded-tensor lengths."""
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)  # (N,)
    order = np.argsort(-sizes, kind="stable")  # (N,) longest first
    return pack(order, sizes, sizes, max_tokens=batch_tokens, max_sentences=max_sentences)


def equalize(batches: list[list[int]], num_replicas: int) -> list[list[int]]:
    """Make len(batches) a multiple of num_replicas: split the largest batches in two (in place
    in the list, deterministically); if too few can be split, repeat batches from the start."""
    missing = -len(batches) % num_replicas
    if missing == 0:
        return batches
    by_size = sorted(range(len(batches)), key=lambda i: (-len(batches[i]), i))
    to_split = {i for i in by_size[:missing] if len(batches[i]) >= 2}
    out = []
    for i, b in enumerate(batches):
        if i in to_split:
            half = len(b) // 2
            out += [b[:half], b[half:]]
        else:
            out.append(b)
    repeat = 0
    while len(out) % num_replicas:  # tiny data only: repeat batches from the start
        out.append(out[repeat])
        repeat += 1
    return out


@dataclass
class Batch:
    """A padded batch; B sentences, S = max source length + 1, T = max target length + 1."""

    src: torch.Tensor  # [B, S] long: ids + EOS, right-padded with PAD
    tgt_in: torch.Tensor  # [B, T] long: BOS + ids (decoder input, shifted right)
    tgt_out: torch.Tensor  # [B, T] long: ids + EOS (what the decoder must predict)
    n_src_tokens: int  # non-pad positions in src
    n_tgt_tokens: int  # non-pad positions in tgt_out

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        move = lambda x: x.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(
            move(self.src), move(self.tgt_in), move(self.tgt_out), self.n_src_tokens, self.n_tgt_tokens
        )


def collate(examples: Sequence[tuple[np.ndarray, np.ndarray]]) -> Batch:
    """Pad a list of (src_ids, tgt_ids) piece arrays into a Batch (see its field comments); the
    special ids are nmt.vocab's, the ones `nmt prepare` wrote the data with."""
    pad, bos, eos = PAD, BOS, EOS
    b = len(examples)
    s_len = max((len(s) for s, _ in examples), default=0) + 1
    t_len = max((len(t) for _, t in examples), default=0) + 1
    src = np.full((b, s_len), pad, dtype=np.int64)  # [B, S]
    tgt_in = np.full((b, t_len), pad, dtype=np.int64)  # [B, T]
    tgt_out = np.full((b, t_len), pad, dtype=np.int64)  # [B, T]
    n_src = n_tgt = 0
    for row, (s, t) in enumerate(examples):
        ls, lt = len(s), len(t)
        src[row, :ls], src[row, ls] = s, eos
        tgt_in[row, 0], tgt_in[row, 1 : lt + 1] = bos, t
        tgt_out[row, :lt], tgt_out[row, lt] = t, eos
        n_src += ls + 1
        n_tgt += lt + 1
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), n_src, n_tgt)
