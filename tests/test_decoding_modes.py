"""Decoding modes of nmt.infer.search on hand-built distributions and a tiny model: PAD/BOS never
chosen, prefix-constrained decoding, sampling, ensembles, int8."""

import copy
import math
import random
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from test_search import B_, LONG_WINS, A, FakeModel, src

from nmt.attention import MultiheadAttention
from nmt.config import tiny
from nmt.infer.options import Sampling, SearchOptions
from nmt.infer.search import (
    BOS,
    EOS,
    PAD,
    Ensemble,
    beam_search,
    filter_probs,
    greedy_search,
    sample,
    sentence_rng,
)
from nmt.model import Transformer

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics

L = math.log


def lp(n, alpha=0.6):
    return ((5 + n) / 6) ** alpha


# ----------------------------------------------------------------------------- PAD / BOS
def test_pad_and_bos_are_never_chosen():
    """p(PAD) = 0.4 is the most probable token, p(BOS) = 0.2 the next: neither may be output,
    and the other tokens keep the model's log-probabilities (no renormalisation)."""
    model = FakeModel({9: {(): {PAD: 0.4, BOS: 0.2, A: 0.25, EOS: 0.15}, (A,): {PAD: 0.5, EOS: 0.5}}})
    [hyps] = beam_search(model, src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=5))
    assert [h.tokens for h in hyps] == [[], [A]]
    assert [h.score for h in hyps] == pytest.approx([L(0.15), L(0.25) + L(0.5)])
    [greedy] = greedy_search(model, src(9), SearchOptions(max_len_a=0, max_len_b=5))
    assert greedy.tokens == [A] and greedy.score == pytest.approx(L(0.25) + L(0.5))  # argmax A, then EOS
    [drawn] = sample(model, src(9), SearchOptions(max_len_a=0, max_len_b=5), rngs=[random.Random(0)])
    assert PAD not in drawn.tokens and BOS not in drawn.tokens


# ----------------------------------------------------------------------------- prefix
def test_prefix_forces_the_start_then_searches_on():
    model = FakeModel({9: LONG_WINS})
    # unconstrained, alpha 0: [] wins; forced to start with A, the search continues to A A A EOS
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=10), prefix=[[A]]
    )
    assert [h.tokens for h in hyps] == [[A, A, A], [A]]
    assert hyps[0].positional_scores == pytest.approx([L(0.5), L(0.95), L(0.95), L(0.95)])
    assert hyps[1].score == pytest.approx(L(0.5) + L(0.05))
    # a prefix the model finds unlikely (p = 0.05) is still forced, and scored with its own p
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.6, max_len_a=0, max_len_b=10), prefix=[[B_]]
    )
    assert hyps[0].tokens == [B_] and hyps[0].score == pytest.approx(L(0.05) / lp(2))
    # a prefix longer than max length: the max length grows to hold it plus EOS
    [hyps] = beam_search(
        model, src(9), SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=1), prefix=[[A, A]]
    )
    assert hyps[0].tokens == [A, A]
    # a batch: per-sentence prefixes ([] = none) equal each sentence searched alone
    both = beam_search(
        FakeModel({9: LONG_WINS}),
        src(9, 9),
        SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=10),
        prefix=[[], [A]],
    )
    assert [h[0].tokens for h in both] == [[], [A, A, A]]
    with pytest.raises(ValueError, match="no room for EOS"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6), prefix=[[A] * 64])
    with pytest.raises(ValueError, match="PAD, BOS or EOS"):
        beam_search(model, src(9), SearchOptions(beam=2, alpha=0.6), prefix=[[A, EOS]])


@torch.no_grad()
def test_prefix_on_a_real_model_scores_are_teacher_forced():
    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    source = torch.tensor([[5, 9, 12, 7, EOS], [8, 8, 30, EOS, PAD]])
    prefixes = [[11, 12, 13], [20]]
    result = beam_search(model, source, SearchOptions(beam=3, alpha=0.6, max_len_b=6), prefix=prefixes)
    for i, (pre, [best]) in enumerate(zip(prefixes, result)):
        assert best.tokens[: len(pre)] == pre
        tgt = torch.tensor([[BOS] + best.tokens])  # teacher forcing the found output
        logp = F.log_softmax(model(source[i : i + 1, : 5 - i], tgt).float(), dim=-1)[0]  # (T, W)
        expected = [float(logp[j, tok]) for j, tok in enumerate(best.tokens + [EOS])]
        assert best.positional_scores == pytest.approx(expected, abs=1e-4)


# ----------------------------------------------------------------------------- sampling
def test_filter_probs_topk_topp():
    probs = torch.tensor([[0.125, 0.5, 0.25, 0.125]])  # exact in binary
    assert filter_probs(probs, topk=2).tolist() == [[0.0, 0.5, 0.25, 0.0]]
    assert filter_probs(probs, topp=0.5).tolist() == [[0.0, 0.5, 0.0, 0.0]]  # 0.5 reaches 0.5
    assert filter_probs(probs, topp=0.6).tolist() == [[0.0, 0.5, 0.25, 0.0]]
    assert filter_probs(probs, topk=3, topp=0.8).tolist() == [[0.125, 0.5, 0.25, 0.0]]  # ties: first kept
    assert filter_probs(probs, topk=0, topp=1.0).tolist() == probs.tolist()


ONE_STEP = {9: {(): {A: 0.5, B_: 0.3, EOS: 0.2}}}  # then EOS with p = 1


def first_token_freq(n, **sampling):
    hyps = sample(
        FakeModel(ONE_STEP),
        src(*[9] * n),
        SearchOptions(max_len_a=0, max_len_b=4, sampling=Sampling(**sampling)),
        rngs=[sentence_rng(1, i) for i in range(n)],
    )
    return {tok: sum((h.tokens[:1] or [EOS]) == [tok] for h in hyps) / n for tok in (A, B_, EOS)}, hyps


def test_sampling_follows_the_distribution_and_its_filters():
    freq, hyps = first_token_freq(2000)
    for tok, p in ((A, 0.5), (B_, 0.3), (EOS, 0.2)):
        assert abs(freq[tok] - p) < 0.04  # 4 standard deviations at n = 2000
    h = next(h for h in hyps if h.tokens == [A])
    assert h.score == pytest.approx(L(0.5)) and h.positional_scores == pytest.approx([L(0.5), 0.0])
    freq, _ = first_token_freq(2000, temperature=0.5)  # p^2 renormalised: .25/.38, .09/.38, .04/.38
    assert abs(freq[A] - 0.25 / 0.38) < 0.04 and abs(freq[EOS] - 0.04 / 0.38) < 0.03
    freq, _ = first_token_freq(300, topk=1)
    assert freq[A] == 1.0  # top-1 sampling is greedy
    freq, _ = first_token_freq(2000, topp=0.7)  # nucleus {A, B}: 5/8 and 3/8
    assert freq[EOS] == 0.0 and abs(freq[A] - 0.625) < 0.04


def test_sampling_at_a_vanishing_temperature_is_greedy():
    """T = 1e-45: every logp / T overflows to -inf; the limit T -> 0 is the argmax (never PAD)."""
    freq, hyps = first_token_freq(50, temperature=1e-45)
    assert freq[A] == 1.0 and all(h.tokens == [A] for h in hyps)


@pytest.mark.parametrize("temperature", [math.inf, math.nan, 0.0])
def test_sampling_at_an_infinite_or_nan_temperature_is_a_value_error(temperature):
    """T = inf or nan defines no distribution (every logp / T is nan or 0 / inf): refused like T = 0
    (was: sampled as greedy, by the argmax that stands for T -> 0)."""
    with pytest.raises(ValueError, match=rf"^temperature={temperature}, topk=0, topp=1.0: need 0 < T < inf"):
        first_token_freq(5, temperature=temperature)


@torch.no_grad()
def test_sampling_is_reproducible_by_seed_and_independent_of_batching():
    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    g = torch.Generator().manual_seed(3)
    rows = [torch.randint(4, 40, (n,), generator=g).tolist() + [EOS] for n in (3, 9, 6)]
    batch = torch.tensor([r + [PAD] * (10 - len(r)) for r in rows])

    def draw(seed, indices, source):
        return [
            h.tokens
            for h in sample(
                model,
                source,
                SearchOptions(max_len_b=8, sampling=Sampling(topk=20)),
                rngs=[sentence_rng(seed, i) for i in indices],
            )
        ]

    first = draw(7, range(3), batch)
    assert draw(7, range(3), batch) == first
    assert [draw(7, [i], batch[i : i + 1])[0] for i in range(3)] == first  # alone = in a batch
    assert draw(8, range(3), batch) != first
    # with prefix forcing
    [out] = sample(model, batch[:1], SearchOptions(max_len_b=8), rngs=[sentence_rng(0, 0)], prefix=[[17, 18]])
    assert out.tokens[:2] == [17, 18]


# ----------------------------------------------------------------------------- ensembles
@dataclass
class VocabCfg:
    max_positions: int = 64
    tgt_vocab_size: int = 6


def test_ensemble_averages_log_probabilities():
    m1 = FakeModel({9: {(): {A: 0.6, EOS: 0.4}}})
    m2 = FakeModel({9: {(): {A: 0.2, EOS: 0.8}}})
    m1.cfg = m2.cfg = VocabCfg()
    # mean log p: A sqrt(.12), EOS sqrt(.32), renormalised by the search
    z = math.sqrt(0.12) + math.sqrt(0.32)
    [hyps] = beam_search(
        Ensemble([m1, m2]), src(9), SearchOptions(beam=2, alpha=0.0, nbest=2, max_len_a=0, max_len_b=4)
    )
    assert [h.tokens for h in hyps] == [[], [A]]
    assert [h.score for h in hyps] == pytest.approx([L(math.sqrt(0.32) / z), L(math.sqrt(0.12) / z)])
    # alone, m1 prefers [A]
    [alone] = beam_search(m1, src(9), SearchOptions(beam=2, alpha=0.0, max_len_a=0, max_len_b=4))
    assert alone[0].tokens == [A]


@torch.no_grad()
def test_ensemble_of_a_model_with_itself_equals_the_model():
    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    source = torch.tensor([[5, 9, 12, 7, EOS], [8, 8, 30, EOS, PAD]])
    alone = beam_search(model, source, SearchOptions(beam=3, alpha=0.6, nbest=2, max_len_b=6))
    twice = beam_search(
        Ensemble([model, model]), source, SearchOptions(beam=3, alpha=0.6, nbest=2, max_len_b=6)
    )
    for a, b in zip(alone, twice):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
    other = Transformer(tiny(50))
    with pytest.raises(ValueError, match="vocabulary"):
        Ensemble([model, other])


# ----------------------------------------------------------------------------- int8
@torch.no_grad()
def test_int8_quantizes_every_linear_and_stays_close():
    from nmt.infer.quantize import quantize_int8

    torch.manual_seed(0)
    model = Transformer(tiny(40)).eval()
    q = quantize_int8(model)
    assert model.decoder.output_projection is None  # the float model is untouched
    assert not any(type(m) is torch.nn.Linear for m in q.modules())
    source = torch.tensor([[5, 9, 12, 7, EOS], [8, 8, 30, EOS, PAD]])
    tgt = torch.tensor([[BOS, 4, 9, 11], [BOS, 30, 31, 5]])
    p_float = F.softmax(model(source, tgt), dim=-1)
    p_int8 = F.softmax(q(source, tgt), dim=-1)
    assert (p_float - p_int8).abs().max() < 0.02
    # self-attention's q/k/v (cross-attention's k/v) run as one fused int8 product: the same
    # logits as the three (two) int8 layers on their own
    attns = [m for m in q.modules() if isinstance(m, MultiheadAttention)]
    assert all((m.fused_qkv is None) != (m.fused_kv is None) for m in attns)
    separate = copy.deepcopy(q)
    for m in separate.modules():
        if isinstance(m, MultiheadAttention):
            m.fused_qkv = m.fused_kv = None
    torch.testing.assert_close(q(source, tgt), separate(source, tgt), atol=1e-5, rtol=1e-5)
    # incremental decoding and search run on the quantized model
    assert len(beam_search(q, source, SearchOptions(beam=2, alpha=0.6, max_len_b=4))) == 2


# ----------------------------------------------------------------------------- the CLI and the API
def seeded_checkpoint(folder, *, vocab_seed=0, weight_seed=0):
    import dataclasses

    import sentencepiece as spm

    from nmt.checkpoint import save

    rng = random.Random(vocab_seed)
    words = ["haus", "katze", "hund", "baum", "rot", "blau", "gross", "klein", "laeuft", "der", "die", "und"]
    lines = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 10))) + "." for _ in range(300)]
    folder.mkdir()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(folder / "spm"),
        vocab_size=60 + vocab_seed,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        character_coverage=1.0,
        minloglevel=2,
    )
    torch.manual_seed(weight_seed)
    cfg = tiny(60 + vocab_seed)
    return save(
        folder / "checkpoint",
        model=Transformer(cfg),
        spm_model=folder / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


@pytest.fixture(scope="module")
def vocab_and_weight_checkpoints(tmp_path_factory):
    """Two random-weight checkpoints of one vocabulary (weight seeds 0 and 1) and one of another."""
    tmp = tmp_path_factory.mktemp("modes")
    return (
        seeded_checkpoint(tmp / "a"),
        seeded_checkpoint(tmp / "b", weight_seed=1),
        seeded_checkpoint(tmp / "other_vocab", vocab_seed=1),
    )


def run_cli(tmp_path, *argv):
    """`nmt translate ARGV` at --precision fp32 unless ARGV says otherwise (the Translators it is
    compared with are fp32: `auto` is bf16 on CPUs with AMX/AVX512-BF16)."""
    from nmt.cli import main

    out = tmp_path / "out.txt"
    out.unlink(missing_ok=True)
    fixed = ["-o", str(out), "--quiet", "--no-guards", "--max-len-a", "0", "--max-len-b", "5"]
    status = main(["translate", "--precision", "fp32", *map(str, argv), *fixed])
    return status, out.read_text(encoding="utf-8").splitlines() if out.exists() else None


def test_cli_refuses_an_infinite_sampling_temperature(vocab_and_weight_checkpoints, tmp_path, capsys):
    src = tmp_path / "src.txt"
    src.write_text("der hund laeuft.\n", encoding="utf-8")
    status, out = run_cli(
        tmp_path, vocab_and_weight_checkpoints[0], "-i", src, "--sampling", "--temperature", "inf"
    )
    assert status == 2 and out is None
    assert "--temperature inf --topk 0 --topp 1.0: need 0 < T < inf" in capsys.readouterr().err


def test_cli_modes(vocab_and_weight_checkpoints, tmp_path, capsys):
    from nmt.infer.translate import Sampling, Translator

    a, b, other = vocab_and_weight_checkpoints
    src = tmp_path / "src.txt"
    src.write_text("der hund laeuft.\n\ndie katze.\n", encoding="utf-8")
    prefix = tmp_path / "prefix.txt"
    prefix.write_text("rot\n\n\n", encoding="utf-8")
    status, plain = run_cli(tmp_path, a, "-i", src, "--beam", "2")
    assert status == 0 and len(plain) == 3 and plain[1] == ""
    status, forced = run_cli(tmp_path, a, "-i", src, "--beam", "2", "--prefix-file", prefix)
    assert status == 0 and forced[0].startswith("rot") and forced[2] == plain[2]
    api = Translator.load(a, precision="fp32").translate_sentences(
        ["der hund laeuft.", "die katze."], beam=2, max_len_a=0, max_len_b=5, prefix=["rot", ""]
    )
    assert api == [forced[0], forced[2]]
    status, drawn = run_cli(tmp_path, a, "-i", src, "--sampling", "--seed", "3", "--topk", "10")
    assert (
        status == 0
        and run_cli(tmp_path, a, "-i", src, "--sampling", "--seed", "3", "--topk", "10")[1] == drawn
    )
    assert (
        Translator.load(a, precision="fp32").translate(
            ["der hund laeuft.", "", "die katze."],
            max_len_a=0,
            max_len_b=5,
            sampling=Sampling(topk=10, seed=3),
        )
        == drawn
    )
    status, ensemble = run_cli(tmp_path, a, b, "-i", src, "--beam", "2")
    assert status == 0 and len(ensemble) == 3
    status, int8 = run_cli(tmp_path, a, "-i", src, "--beam", "2", "--precision", "int8")
    assert status == 0 and len(int8) == 3
    status, fast = run_cli(tmp_path, a, "-i", src, "--beam", "2", "--stopping", "fast")
    assert status == 0 and len(fast) == 3 and fast[1] == ""
    assert (
        Translator.load(a, precision="fp32").translate(
            ["der hund laeuft.", "", "die katze."], beam=2, max_len_a=0, max_len_b=5, stopping="fast"
        )
        == fast
    )
    capsys.readouterr()
    # one-line errors: ensemble vocabularies differ, prefix line count, sampling with nbest
    assert run_cli(tmp_path, a, other, "-i", src) == (2, None)
    err = capsys.readouterr().err
    assert err.startswith("nmt translate: error: ") and "spm.model" in err and err.count("\n") == 1
    prefix.write_text("rot\n", encoding="utf-8")
    assert run_cli(tmp_path, a, "-i", src, "--prefix-file", prefix) == (2, None)
    assert "prefix.txt: 1 prefix lines for 3 input lines" in capsys.readouterr().err
    assert run_cli(tmp_path, a, "-i", src, "--sampling", "--beam", "2", "--nbest", "2") == (2, None)
    assert "--sampling --nbest 2" in capsys.readouterr().err


def test_int8_runs_on_the_cpu_by_default_where_cuda_is_available(
    vocab_and_weight_checkpoints, tmp_path, monkeypatch
):
    """int8 is CPU-only (fbgemm): with no --device it takes the CPU also on a GPU machine, where
    the default device of the other precisions is CUDA (found on an H200: `--precision int8` was
    refused there as 'int8 runs on CPU only, not on cuda')."""
    from nmt.infer.translate import Translator

    a = vocab_and_weight_checkpoints[0]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert Translator.load(a, precision="int8").device == torch.device("cpu")
    (tmp_path / "src.txt").write_text("der hund.\n", encoding="utf-8")
    status, int8 = run_cli(tmp_path, a, "-i", tmp_path / "src.txt", "--beam", "2", "--precision", "int8")
    assert status == 0 and len(int8) == 1
