"""Attention weights (nmt.infer.attention_maps), `nmt translate --alignment`, `nmt plot-attention`."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from nmt.checkpoint import save
from nmt.cli import main
from nmt.config import tiny
from nmt.infer.attention_maps import attention_maps, format_alignment, hard_alignment, unaligned_sources
from nmt.infer.translate import Translator
from nmt.model import Transformer
from nmt.vocab import EOS

# kernel- and precision-sensitive: `make test` runs this file again on the AVX2-only path (conftest)
pytestmark = pytest.mark.numerics

WORDS = ["haus", "katze", "hund", "baum", "rot", "blau", "gross", "klein", "der", "die", "das", "ein"]


@pytest.fixture(scope="module")
def four_head_checkpoint(tmp_path_factory):
    import sentencepiece as spm

    tmp = tmp_path_factory.mktemp("attn")
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10))) + "." for _ in range(300)]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_prefix=str(tmp / "spm"),
        vocab_size=60,
        model_type="bpe",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        character_coverage=1.0,
        minloglevel=2,
    )
    torch.manual_seed(0)
    cfg = dataclasses.replace(tiny(60), n_layers=2, n_heads=4)
    return save(
        tmp / "checkpoint",
        model=Transformer(cfg),
        spm_model=tmp / "spm.model",
        config={"model": dataclasses.asdict(cfg), "train": {}, "data": {}},
    )


def test_weights_reproduce_the_model_attention_outputs(four_head_checkpoint):
    """softmax(QK^T/sqrt(d_k)) recomputed from the hooks, times V, equals what each attention
    module actually fed to its out_proj (fused SDPA in the model): the weights are the model's."""
    model = Translator.load(four_head_checkpoint, device="cpu", precision="fp32").model
    src, tgt = [5, 9, 14, 7, 22, EOS], [8, 31, 12, 40]
    seen = {}
    modules = {
        "enc": model.encoder.layers[1].self_attn,
        "dec": model.decoder.layers[1].self_attn,
        "cross": model.decoder.layers[0].encoder_attn,
    }
    hooks = []
    for name, attn in modules.items():
        hooks.append(attn.v_proj.register_forward_hook(lambda m, i, o, n=name: seen.__setitem__(n + "v", o)))
        hooks.append(
            attn.out_proj.register_forward_hook(lambda m, i, o, n=name: seen.__setitem__(n + "in", i[0]))
        )
    maps = attention_maps(model, src, tgt)
    for h in hooks:
        h.remove()
    s, t, hh, d_v = len(src), len(tgt) + 1, model.cfg.n_heads, model.cfg.d_v
    assert maps.encoder_self.shape == (2, hh, s, s)
    assert maps.decoder_self.shape == (2, hh, t, t) and maps.cross.shape == (2, hh, t, s)
    for name, weights in (
        ("enc", maps.encoder_self[1]),
        ("dec", maps.decoder_self[1]),
        ("cross", maps.cross[0]),
    ):
        v = seen[name + "v"][0].view(-1, hh, d_v).transpose(0, 1)  # (H, N, V)
        mixed = (weights @ v).transpose(0, 1).reshape(weights.size(1), hh * d_v)  # (T, H*V)
        torch.testing.assert_close(mixed, seen[name + "in"][0], atol=1e-5, rtol=1e-4)
    for w in (maps.encoder_self, maps.decoder_self, maps.cross):
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))
    assert torch.all(maps.decoder_self.triu(diagonal=1) == 0)  # causal


def test_weights_of_restricted_self_attention_are_the_models():
    """With model.attention_window r (section 4) the self-attention weights are those the model
    used: zero for keys farther than r (and later keys in the decoder), and times V they give
    what each module fed to its out_proj (were: computed with full attention, a wrong heatmap)."""
    torch.manual_seed(0)
    model = Transformer(dataclasses.replace(tiny(60), n_layers=2, n_heads=4, attention_window=1)).eval()
    src, tgt = [5, 9, 14, 7, 22, EOS], [8, 31, 12, 40]
    seen = {}
    modules = {"enc": model.encoder.layers[1].self_attn, "dec": model.decoder.layers[1].self_attn}
    hooks = []
    for name, attn in modules.items():
        hooks.append(attn.v_proj.register_forward_hook(lambda m, i, o, n=name: seen.__setitem__(n + "v", o)))
        hooks.append(
            attn.out_proj.register_forward_hook(lambda m, i, o, n=name: seen.__setitem__(n + "in", i[0]))
        )
    maps = attention_maps(model, src, tgt)
    for h in hooks:
        h.remove()
    hh, d_v = model.cfg.n_heads, model.cfg.d_v
    for name, weights in (("enc", maps.encoder_self[1]), ("dec", maps.decoder_self[1])):
        v = seen[name + "v"][0].view(-1, hh, d_v).transpose(0, 1)  # (H, N, V)
        mixed = (weights @ v).transpose(0, 1).reshape(weights.size(1), hh * d_v)  # (T, H*V)
        torch.testing.assert_close(mixed, seen[name + "in"][0], atol=1e-5, rtol=1e-4)
    s, t = len(src), len(tgt) + 1
    far = lambda n: (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs() > 1  # noqa: E731
    assert torch.all(maps.encoder_self[:, :, far(s)] == 0)
    assert torch.all(maps.decoder_self[:, :, far(t)] == 0) and torch.all(maps.decoder_self.triu(1) == 0)
    for w in (maps.encoder_self, maps.decoder_self, maps.cross):
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1]))


def test_hard_alignment_is_last_layer_mean_of_heads_without_eos():
    src, tgt = [10, 11, 12, EOS], [20, 21]
    cross = torch.zeros(2, 2, 3, 4)  # (L, H, T=BOS+2, S=3+EOS)
    cross[0, :, :, 0] = 1.0  # layer 1 would align everything to source 0: not used
    cross[1, 0, 0] = torch.tensor([0.1, 0.2, 0.3, 0.4])  # row 0 predicts tgt[0]
    cross[1, 1, 0] = torch.tensor([0.0, 0.6, 0.0, 0.4])  # mean: [.05 .4 .15 .4]: EOS ties/excluded -> 1
    cross[1, 0, 1] = torch.tensor([0.5, 0.0, 0.0, 0.5])
    cross[1, 1, 1] = torch.tensor([0.0, 0.0, 0.6, 0.4])  # mean: [.25 0 .3 .45]: EOS excluded -> 2
    cross[1, :, 2, 3] = 1.0  # the EOS row (predicts EOS) is not aligned
    assert hard_alignment(cross, src, tgt) == [(1, 0), (2, 1)]
    assert hard_alignment(cross, src, tgt, layer=0) == [(0, 0), (0, 1)]
    assert format_alignment([(1, 0), (2, 1)]) == "1-0 2-1"
    assert hard_alignment(cross, [EOS], tgt) == [] and hard_alignment(cross, src, []) == []


def test_the_diagonal_prior_moves_an_off_diagonal_peak_only_when_the_diagonal_is_close_behind():
    src, tgt = [10, 11, 12, 13, EOS], [20, 21, 22, 23]
    cross = torch.full((1, 1, 5, 5), 0.1)  # (L, H, T=4+1, S=4+EOS)
    for j in range(4):
        cross[0, 0, j, j] = 0.5  # the diagonal
    cross[0, 0, 0, 3] = 0.6  # output 0's peak on the last source piece, the diagonal close behind
    cross[0, 0, 2, 0] = 0.9  # output 2's peak far ahead of the diagonal
    assert hard_alignment(cross, src, tgt) == [(3, 0), (1, 1), (0, 2), (3, 3)]
    # prior of width 0.1 over relative positions: output 0 back on the diagonal; output 2's
    # distance is 0.5 (weight exp(-12.5)), so 0.9 loses to 0.5 there too
    assert hard_alignment(cross, src, tgt, diagonal=0.1) == [(0, 0), (1, 1), (2, 2), (3, 3)]
    # a wide prior keeps a clear peak: output 2 stays with source 0
    assert hard_alignment(cross, src, tgt, diagonal=1.0) == [(0, 0), (1, 1), (0, 2), (3, 3)]


def test_a_source_piece_no_output_piece_chose_gets_the_output_piece_attending_to_it_most():
    src, tgt = [10, 11, 12, 13, EOS], [20, 21, 22, 23]
    cross = torch.full((1, 1, 5, 5), 0.1)  # (L, H, T=4+1, S=4+EOS)
    for j in range(4):
        cross[0, 0, j, j] = 0.5
    cross[0, 0, 2, 0], cross[0, 0, 3, 4] = 0.9, 2.0  # output 2 -> source 0; EOS's column never counts
    pairs = hard_alignment(cross, src, tgt)  # source 2 chosen by no output piece
    assert pairs == [(0, 0), (1, 1), (0, 2), (3, 3)]
    assert unaligned_sources(cross, src, tgt, pairs) == [(2, 2)]  # column 2's largest weight: row 2
    assert unaligned_sources(cross, src, tgt, pairs + [(2, 0)]) == []
    assert unaligned_sources(cross, [EOS], tgt, []) == [] and unaligned_sources(cross, src, [], []) == []


def test_translate_alignment_output(four_head_checkpoint, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("der hund\n\nein rot haus.\n", encoding="utf-8")
    # fp32 as the Translator below: `auto` picks bf16 on CPUs with AVX512-BF16/AMX, and outputs may differ
    fast = ["--max-len-a", "0", "--max-len-b", "6", "--quiet", "--no-guards", "--precision", "fp32"]
    assert (
        main(["translate", str(four_head_checkpoint), "-i", str(src), "--alignment", "--beam", "2", *fast])
        == 0
    )
    lines = capsys.readouterr().out.split("\n")
    assert len(lines) == 4 and lines[1] == "\t"
    t = Translator.load(four_head_checkpoint, device="cpu", precision="fp32")
    best = t.translate_nbest(["der hund", "", "ein rot haus."], beam=2, max_len_a=0, max_len_b=6)
    for line, sent, hyps in zip(lines, ["der hund", "", "ein rot haus."], best):
        text, pairs = line.split("\t")
        assert text == hyps[0].text
        n_src = len(t.sp.encode(sent))
        got = [tuple(map(int, p.split("-"))) for p in pairs.split()]
        assert [j for _, j in got] == list(range(len(hyps[0].tokens) if n_src else 0))
        assert all(0 <= i < n_src for i, _ in got)
    assert (
        main(
            [
                "translate",
                str(four_head_checkpoint),
                "-i",
                str(src),
                "--alignment",
                "--beam",
                "2",
                "--nbest",
                "2",
                *fast,
            ]
        )
        == 0
    )
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 5 and all(len(r.split("\t")) == 4 for r in rows)  # an empty line: one output


def test_plot_attention(four_head_checkpoint, tmp_path, capsys):
    out = tmp_path / "plots"
    assert (
        main(
            [
                "plot-attention",
                str(four_head_checkpoint),
                "der hund und die katze",
                "-o",
                str(out),
                "--beam",
                "1",
                "--max-len-b",
                "3",
            ]
        )
        == 0
    )
    names = sorted(p.name for p in out.glob("*.png"))
    assert names == sorted(
        f"{k}-layer{i}.png" for k in ("encoder-self", "decoder-self", "cross") for i in (1, 2)
    )
    assert all((out / n).stat().st_size > 3000 for n in names)
    data = json.loads((out / "attention.json").read_text())
    assert data["source_pieces"][-1] == "</s>" and data["target_pieces"][0] == "<s>"
    assert len(data["cross"]) == 2 and len(data["cross"][0]) == 4
    assert len(data["cross"][0][0]) == len(data["target_pieces"])
    assert main(["plot-attention", str(four_head_checkpoint), "  ", "-o", str(tmp_path / "x")]) == 2
    assert "nmt plot-attention: error: the sentence is empty" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_plot_attention_names_an_output_folder_it_cannot_create(four_head_checkpoint, tmp_path, capsys):
    """-o naming a file, or a folder under a file, is one line naming it (was: 'internal error:
    FileExistsError ... this is a bug in nmt')."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    for out in (notes, notes / "plots"):
        assert (
            main(["plot-attention", str(four_head_checkpoint), "der hund", "-o", str(out), "--beam", "1"])
            == 2
        )
        err = capsys.readouterr().err
        assert err.startswith(f"nmt plot-attention: error: -o {out}: cannot create the folder: ")
        assert err.count("\n") == 1
    assert notes.read_text() == "mine\n"
