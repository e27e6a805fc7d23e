"""What the import tests share: the originals built here with the real libraries (no downloads): a
tiny random-weight transformers MarianMTModel with SentencePiece models trained on the tiny corpus's
English and German sides and MarianTokenizer reading them (OPUS-MT's layout: eos 0, unk 1, padding
= decoder start = the last id, a joint vocab.json), and the comparison of output pieces."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import torch
from train_fixtures import GERMAN, WORDS

SENTENCES = [
    " ".join(random.Random(i).choice(WORDS) for _ in range(random.Random(i).randint(2, 9)))
    for i in range(300)
]
TARGETS = [" ".join(GERMAN[w] for w in s.split()) for s in SENTENCES]  # what target.spm is trained on


def train_spm(lines: list[str], vocab_size: int) -> bytes:
    """A unigram SentencePiece model with Marian's ids (unk 0, <s> 1, </s> 2), as bytes."""
    import sentencepiece as spm

    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=out,
        vocab_size=vocab_size,
        model_type="unigram",
        character_coverage=1.0,
        minloglevel=2,
    )
    return out.getvalue()


def joint_vocab(*models: bytes) -> dict[str, int]:
    """OPUS-MT's vocab.json: </s> 0, <unk> 1, every other piece of the models once, <pad> last."""
    import sentencepiece as spm

    pieces = ["</s>", "<unk>"]
    for m in models:
        sp = spm.SentencePieceProcessor(model_proto=m)
        for i in range(sp.get_piece_size()):
            if not (sp.is_control(i) or sp.is_unknown(i)) and sp.id_to_piece(i) not in pieces:
                pieces.append(sp.id_to_piece(i))
    return {p: i for i, p in enumerate([*pieces, "<pad>"])}


def make_marian(
    folder: Path, *, activation: str = "swish", layers: tuple[int, int] = (2, 1), eos_bias: float = 2.5
) -> Path:
    """save_pretrained of a random MarianMTModel (d_model 16) and its MarianTokenizer at ``folder``:
    non-trivial LayerNorms and final_logits_bias, and EOS made likely so that outputs end early."""
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True, exist_ok=True)
    src = train_spm(SENTENCES, 45)
    tgt = train_spm(TARGETS, 45)
    vocab = joint_vocab(src, tgt)
    spm_dir = folder / "_spm"
    spm_dir.mkdir()
    (spm_dir / "source.spm").write_bytes(src)
    (spm_dir / "target.spm").write_bytes(tgt)
    (spm_dir / "vocab.json").write_text(json.dumps(vocab))
    n = len(vocab)
    cfg = MarianConfig(
        vocab_size=n,
        decoder_vocab_size=n,
        d_model=16,
        encoder_layers=layers[0],
        decoder_layers=layers[1],
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        max_position_embeddings=64,
        activation_function=activation,
        pad_token_id=n - 1,
        eos_token_id=0,
        decoder_start_token_id=n - 1,
        scale_embedding=True,
        init_std=0.3,  # weights large enough that outputs depend on the input
    )
    torch.manual_seed(0)
    model = MarianMTModel(cfg).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
        model.model.shared.weight[n - 1] = 0.0  # the padding (decoder start) row is zero, as OPUS-MT's
        model.final_logits_bias.normal_(0.0, 0.5)
        model.final_logits_bias[0, 0] += eos_bias  # EOS: some outputs end at once, the others at the limit
    model.save_pretrained(folder)
    MarianTokenizer(
        source_spm=str(spm_dir / "source.spm"),
        target_spm=str(spm_dir / "target.spm"),
        vocab=str(spm_dir / "vocab.json"),
        source_lang="en",
        target_lang="de",
    ).save_pretrained(folder)
    for f in spm_dir.iterdir():
        f.unlink()
    spm_dir.rmdir()
    return folder


def hf_pieces(folder: Path, lines: list[str], *, max_len: int, **generate) -> list[list[str]]:
    """transformers' generate on the original, as nmt searches: at most ``max_len`` output tokens
    with EOS forced at the last (forced_eos_token_id), the padding never chosen (bad_words_ids, as
    OPUS-MT's configs have it); each line's output pieces (no start, no EOS)."""
    from transformers import MarianMTModel, MarianTokenizer

    tok = MarianTokenizer.from_pretrained(folder)
    model = MarianMTModel.from_pretrained(folder).eval()
    cfg = model.config
    with torch.no_grad():
        out = model.generate(
            **tok(lines, return_tensors="pt", padding=True),
            bad_words_ids=[[cfg.pad_token_id]],
            forced_eos_token_id=cfg.eos_token_id,
            max_new_tokens=max_len,
            do_sample=False,
            **generate,
        )
    pieces = []
    for ids in out.tolist():
        ids = ids[1 : ids.index(cfg.eos_token_id, 1) if cfg.eos_token_id in ids[1:] else None]
        pieces.append(tok.convert_ids_to_tokens(ids))
    return pieces


def marian_target_pieces(folder: Path, lines: list[str]) -> list[list[str]]:
    """MarianTokenizer's pieces of ``lines`` as targets (``text_target``: target.spm), without </s>."""
    from transformers import MarianTokenizer

    tok = MarianTokenizer.from_pretrained(folder)
    return [tok.convert_ids_to_tokens(ids)[:-1] for ids in tok(text_target=lines)["input_ids"]]
