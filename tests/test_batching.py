"""TokenBatchSampler and collate."""

import itertools

import numpy as np
import pytest
import torch

from nmt.data.batching import Batch, TokenBatchSampler, collate, equalize, pack


def lengths(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, size=n)
    tgt = np.clip(src + rng.integers(-5, 6, size=n), 1, None)
    return src, tgt


def sampler(src, tgt, **kw):
    kw.setdefault("max_tokens", 512)
    return TokenBatchSampler(src_lengths=src, tgt_lengths=tgt, **kw)


def flat(batches):
    return sorted(itertools.chain.from_iterable(batches))


@pytest.mark.parametrize("shuffle", [True, False])
def test_every_example_once_and_within_budget(shuffle):
    src, tgt = lengths()
    s = sampler(src, tgt, shuffle=shuffle)
    for epoch in range(3):
        batches = s.batches(epoch)
        assert flat(batches) == list(range(len(src)))
        for b in batches:  # padded size, +1 for EOS / BOS
            assert len(b) * (src[b].max() + 1) <= 512 and len(b) * (tgt[b].max() + 1) <= 512


def test_oversized_example_gets_own_batch():
    src, tgt = np.array([3, 700, 4, 5]), np.array([3, 2, 4, 900])
    batches = sampler(src, tgt, max_tokens=100).batches(0)
    assert flat(batches) == [0, 1, 2, 3]
    assert [1] in batches and [3] in batches


def test_same_seed_same_batches_and_epochs_differ():
    src, tgt = lengths()
    a, b = sampler(src, tgt, seed=3), sampler(src, tgt, seed=3)
    assert a.batches(0) == b.batches(0) and a.batches(1) == b.batches(1)
    assert a.batches(0) != a.batches(1)
    assert a.batches(0) != sampler(src, tgt, seed=4).batches(0)
    ordered = sampler(src, tgt, shuffle=False)
    assert ordered.batches(0) == ordered.batches(5)


def test_iteration_and_resume_mid_epoch():
    src, tgt = lengths()
    s = sampler(src, tgt, seed=1)
    s.set_epoch(2)
    full = list(s)
    assert full == s.batches(2) and s.state_dict() == {"epoch": 2, "position": len(full)}
    s.set_epoch(2)
    it = iter(s)
    head = [next(it) for _ in range(7)]
    state = s.state_dict()
    assert state == {"epoch": 2, "position": 7}
    resumed = sampler(src, tgt, seed=1)
    resumed.load_state_dict(state)
    assert len(resumed) == len(full) - 7
    assert head + list(resumed) == full


@pytest.mark.parametrize("replicas", [2, 3, 4, 7])
def test_rank_shards_disjoint_complete_equal(replicas):
    src, tgt = lengths(n=997)
    shards = [sampler(src, tgt, seed=5, num_replicas=replicas, rank=r).batches(1) for r in range(replicas)]
    assert len({len(sh) for sh in shards}) == 1  # same number of batches per rank
    everything = [i for sh in shards for b in sh for i in b]
    assert sorted(everything) == list(range(997))  # disjoint and complete: each exactly once
    for sh in shards:
        for b in sh:
            assert len(b) * (max(src[b].max(), tgt[b].max()) + 1) <= 512


def test_tiny_data_many_replicas_repeats_documented():
    src, tgt = np.array([5, 6]), np.array([5, 6])
    shards = [sampler(src, tgt, num_replicas=4, rank=r).batches(0) for r in range(4)]
    assert [len(sh) for sh in shards] == [1, 1, 1, 1]
    assert set(flat(sh[0] for sh in shards)) == {0, 1}  # complete; batches repeated


def test_pack_and_equalize():
    order = np.arange(6)
    sizes = np.array([2, 2, 2, 3, 3, 10])
    assert pack(order, sizes, sizes, max_tokens=6) == [[0, 1, 2], [3, 4], [5]]
    assert equalize([[0, 1, 2], [3, 4], [5]], 2) == [[0], [1, 2], [3, 4], [5]]
    assert equalize([[0], [1]], 2) == [[0], [1]]


def test_collate_exact():
    batch = collate([(np.array([7, 8, 9]), np.array([4])), (np.array([5]), np.array([6, 6]))])
    assert isinstance(batch, Batch)
    assert batch.src.tolist() == [[7, 8, 9, 3], [5, 3, 0, 0]]
    assert batch.tgt_in.tolist() == [[2, 4, 0], [2, 6, 6]]
    assert batch.tgt_out.tolist() == [[4, 3, 0], [6, 6, 3]]
    assert batch.src.dtype == torch.long and batch.tgt_out.dtype == torch.long
    assert (batch.n_src_tokens, batch.n_tgt_tokens) == (6, 5)
    assert batch.to("cpu").src.tolist() == batch.src.tolist()


def test_dataloader_integration():
    src, tgt = lengths(n=50)
    dataset = [(np.full(s, 10), np.full(t, 11)) for s, t in zip(src, tgt)]
    s = sampler(src, tgt)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=s, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == len(s.batches(0))
    assert sum(b.n_src_tokens for b in batches) == int((src + 1).sum())


def test_epoch_uses_its_segmentation_lengths():
    """[K, n] lengths (BPE-dropout copies): epoch e is packed by row e mod K, within budget."""
    rng = np.random.default_rng(0)
    base = rng.integers(1, 20, size=(2, 200))
    longer = base * 3  # a copy segmented into three times as many pieces
    lengths_src, lengths_tgt = np.stack([base[0], longer[0]]), np.stack([base[1], longer[1]])
    sampler = TokenBatchSampler(src_lengths=lengths_src, tgt_lengths=lengths_tgt, max_tokens=128, seed=3)
    for epoch in range(4):
        src, tgt = lengths_src[epoch % 2], lengths_tgt[epoch % 2]
        alone = TokenBatchSampler(src_lengths=src, tgt_lengths=tgt, max_tokens=128, seed=3)
        assert sampler.batches(epoch) == alone.batches(epoch)
        for b in sampler.batches(epoch):
            assert len(b) * (max(max(src[b]), max(tgt[b])) + 1) <= 128 or len(b) == 1
        assert sorted(i for b in sampler.batches(epoch) for i in b) == list(range(200))
    assert len(sampler.batches(1)) > 2 * len(sampler.batches(0))
    with pytest.raises(ValueError, match="shape"):
        TokenBatchSampler(src_lengths=lengths_src, tgt_lengths=lengths_tgt[:1], max_tokens=128)
