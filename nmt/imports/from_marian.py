"""`nmt import huggingface DIR`: a transformers MarianMTModel (the OPUS-MT models) as an nmt checkpoint.

DIR holds what ``save_pretrained`` writes for a MarianMTModel and its MarianTokenizer: config.json,
the weights (model.safetensors, or pytorch_model.bin read with ``torch.load(weights_only=True)``:
tensors only, never pickled objects), source.spm, target.spm and vocab.json (piece -> id, one
vocabulary for both sides whose ids are not the SentencePiece models' own). A Hub id (``org/name``)
is downloaded first where the machine has internet (huggingface_hub).

HF Marian is nmt's post-norm Transformer with fairseq's parameter names; what differs:
  * special ids: Marian's eos 0, unk 1, padding = decoder start (usually the last id); nmt's are
    fixed (nmt.vocab), so the embedding rows and final_logits_bias are permuted
    (nmt.imports.vocabulary: BOS takes Marian's padding row, PAD a zero row that is never chosen);
  * the sinusoidal table is [sin | cos] in halves where nmt interleaves: the model dimension is
    permuted (the inverse of nmt.export.huggingface's permutation; an exact re-parametrisation);
  * final_logits_bias: ModelConfig.output_bias; swish: activation silu; scale_embedding:
    ModelConfig.scale_embeddings.
The checkpoint's spm.model is source.spm and its target_spm.model target.spm (where they differ), both
rewritten onto nmt's ids (nmt.imports.vocabulary.joint_spm): sources are segmented as MarianTokenizer
segments them with source.spm, target text (fine-tuning targets, prefixes, constraints, references) as
it segments targets with target.spm.
Pre-norm variants (normalize_before, add_final_layer_norm, normalize_embedding) and separate encoder
and decoder vocabularies are refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..config import ConfigError, ModelConfig
from .imported import ModelImportError, check_out_dir, write_checkpoint
from .vocabulary import PAD_LOGIT, VocabularyError, joint_spm, load_processor, permute_rows, special_ids

FILES = ("config.json", "source.spm", "target.spm", "vocab.json")
ACTIVATIONS = {"swish": "silu", "silu": "silu", "gelu": "gelu", "relu": "relu"}  # HF name -> nmt's
REFUSED = {  # config.json switches of BART-like variants HF Marian has off
    "normalize_before": "pre-norm layers",
    "add_final_layer_norm": "a final LayerNorm",
    "normalize_embedding": "a LayerNorm on the embeddings",
}


def hf_dir(source: str) -> Path:
    """``source`` as a local directory: itself, or a Hub id downloaded (needs huggingface_hub and
    internet)."""
    path = Path(source)
    if path.exists() or source.count("/") != 1 or source.startswith((".", "/")):
        if not path.is_dir():
            raise ModelImportError(f"{source}: no such directory")
        return path
    try:
        from huggingface_hub import snapshot_download

        patterns = [*FILES, "model.safetensors", "pytorch_model.bin", "tokenizer_config.json"]
        return Path(snapshot_download(source, allow_patterns=patterns))
    except Exception as e:  # ImportError, no network, no such repository
        raise ModelImportError(
            f"{source}: not a directory, and not downloadable from the Hub ({e})"
        ) from None


def read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ModelImportError(
            f"{path}: missing (a MarianMTModel directory holds {', '.join(FILES)})"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelImportError(f"{path}: not readable JSON ({e})") from None


def marian_config(path: Path, hf: dict) -> ModelConfig:
    """nmt's ModelConfig of HF config.json ``hf`` (its vocabulary size set later), or the reason not."""
    if hf.get("model_type") != "marian":
        raise ModelImportError(
            f"{path}: model_type {hf.get('model_type')!r}, expected 'marian' (a MarianMTModel)"
        )
    for key, what in REFUSED.items():
        if hf.get(key):
            raise ModelImportError(
                f"{path}: {key} is true ({what}); nmt imports HF Marian's post-norm layout"
            )
    if not hf.get("share_encoder_decoder_embeddings", True) or not hf.get("tie_word_embeddings", True):
        raise ModelImportError(f"{path}: separate encoder/decoder/output embeddings are not supported")
    act = hf.get("activation_function", "gelu")
    if act not in ACTIVATIONS:
        raise ModelImportError(f"{path}: activation_function {act!r} is not one of {', '.join(ACTIVATIONS)}")
    heads = hf["encoder_attention_heads"]
    if hf["decoder_attention_heads"] != heads or hf["decoder_ffn_dim"] != hf["encoder_ffn_dim"]:
        raise ModelImportError(f"{path}: encoder and decoder of different widths are not supported")
    d_model = hf["d_model"]
    enc, dec = hf["encoder_layers"], hf["decoder_layers"]
    try:
        return ModelConfig(
            n_layers=enc,
            n_encoder_layers=None if enc == dec else enc,
            n_decoder_layers=None if enc == dec else dec,
            d_model=d_model,
            d_ff=hf["encoder_ffn_dim"],
            n_heads=heads,
            d_k=d_model // heads,
            d_v=d_model // heads,
            dropout=float(hf.get("dropout", 0.1)),
            attention_dropout=float(hf.get("attention_dropout", 0.0)),
            activation_dropout=float(hf.get("activation_dropout", 0.0)),
            max_positions=hf["max_position_embeddings"],
            activation=ACTIVATIONS[act],
            scale_embeddings=bool(hf.get("scale_embedding", False)),
            output_bias=True,
        ).validate()
    except (KeyError, TypeError, ConfigError) as e:
        raise ModelImportError(
            f"{path}: not a usable Marian configuration ({type(e).__name__}: {e})"
        ) from None


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """The weights of model.safetensors, else pytorch_model.bin (tensors only), names without 'model.'."""
    from ..checkpoint import CheckpointError, load_tensors

    st, pt = folder / "model.safetensors", folder / "pytorch_model.bin"
    try:
        if st.is_file():
            state = load_tensors(st)
        elif pt.is_file():
            state = torch.load(pt, map_location="cpu", weights_only=True)
        else:
            raise ModelImportError(f"{folder}: no model.safetensors or pytorch_model.bin")
    except CheckpointError as e:
        raise ModelImportError(str(e)) from None
    except ModelImportError:
        raise
    except Exception as e:  # a pickle holding more than tensors, a truncated zip, ...
        first = (str(e).strip().splitlines() or [""])[0]  # torch.load's explanations span lines
        raise ModelImportError(f"{pt}: not a file of tensors ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ModelImportError(f"{pt}: not a state dict of tensors")
    return {k.removeprefix("model."): v.float() for k, v in state.items()}


def vocabulary_pieces(path: Path, vocab: dict, n_rows: int) -> list[str]:
    """vocab.json (piece -> id) as pieces in id order; it must number the weights' rows 0..n-1."""
    if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
        raise ModelImportError(f"{path}: expected a JSON object of piece -> integer id")
    if sorted(vocab.values()) != list(range(n_rows)):
        raise ModelImportError(
            f"{path}: {len(vocab)} pieces, but the weights have {n_rows} embedding rows "
            f"(vocab.json must number them 0..{n_rows - 1}, each once)"
        )
    pieces = [""] * n_rows
    for piece, i in vocab.items():
        pieces[i] = piece
    return pieces


def nmt_state(hf: dict[str, torch.Tensor], vocab, d_model: int) -> dict[str, torch.Tensor]:
    """HF Marian's tensors as nmt's: the model dimension permuted from [sin | cos] halves to nmt's
    interleaved layout, the vocabulary rows reordered to nmt's ids."""
    from ..export.huggingface import halves_permutation

    inv = torch.argsort(halves_permutation(d_model))  # nmt column c is HF column inv[c]
    out = {}
    for name, t in hf.items():
        if name.endswith("embed_positions.weight") or name in (
            "lm_head.weight",
            "decoder.embed_tokens.weight",
        ):
            continue  # rebuilt by nmt (positions) or the shared table itself
        if name in ("shared.weight", "encoder.embed_tokens.weight"):
            out["encoder.embed_tokens.weight"] = permute_rows(t[:, inv], vocab)
            continue
        if name == "final_logits_bias":
            out["decoder.output_bias"] = permute_rows(t.reshape(-1), vocab, fill=PAD_LOGIT)
            continue
        leaf = name.rsplit(".", 2)[-2]
        if leaf in ("q_proj", "k_proj", "v_proj", "fc1"):
            t = t[:, inv] if name.endswith("weight") else t  # reads the residual stream
        elif leaf in ("out_proj", "fc2") or "layer_norm" in leaf:
            t = t[inv]  # writes the residual stream (or normalises it)
        else:
            raise ModelImportError(f"weights: {name} has no counterpart in nmt's Transformer")
        out[name] = t
    return out


def import_huggingface(source: str, out_dir: str | Path, *, log=print) -> Path:
    """`nmt import huggingface`: read ``source`` (a MarianMTModel directory or Hub id), write the nmt
    checkpoint ``out_dir`` (new or empty) atomically."""
    from ..checkpoint import CheckpointError, load_weights
    from ..model import Transformer

    out = check_out_dir(out_dir, source)
    folder = hf_dir(source)
    hf = read_json(folder / "config.json")
    cfg = marian_config(folder / "config.json", hf)
    spm = {}
    for name in ("source.spm", "target.spm"):
        if not (folder / name).is_file():
            raise ModelImportError(f"{folder / name}: missing (the tokenizer's SentencePiece model)")
        spm[name] = (folder / name).read_bytes()
        load_processor(spm[name], source=str(folder / name))
    state = read_weights(folder)
    table = state.get("shared.weight", state.get("encoder.embed_tokens.weight"))
    if table is None:
        raise ModelImportError(f"{folder}: the weights hold no shared embedding (model.shared.weight)")
    pieces = vocabulary_pieces(folder / "vocab.json", read_json(folder / "vocab.json"), table.shape[0])
    try:
        vocab = special_ids(
            pieces,
            pad=hf.get("pad_token_id"),
            unk=pieces.index("<unk>") if "<unk>" in pieces else -1,
            eos=hf.get("eos_token_id"),
            start=hf.get("decoder_start_token_id", hf.get("pad_token_id")),
            source=str(folder / "vocab.json"),
        )
        src_bytes, missing = joint_spm(spm["source.spm"], vocab.pieces, source=str(folder / "source.spm"))
        tgt_bytes, tgt_missing = joint_spm(spm["target.spm"], vocab.pieces, source=str(folder / "target.spm"))
    except VocabularyError as e:
        raise ModelImportError(str(e)) from None
    cfg.src_vocab_size = cfg.tgt_vocab_size = len(vocab.order)
    model = Transformer(cfg)
    try:
        load_weights(model, nmt_state(state, vocab, cfg.d_model), source=str(folder))
    except CheckpointError as e:
        raise ModelImportError(str(e)) from None
    for name, n in (("source.spm", missing), ("target.spm", tgt_missing)):
        if n:
            log(f"nmt import: {n} pieces of {name} are not in vocab.json (Marian reads them as <unk>)")
    tok = read_json(folder / "tokenizer_config.json") if (folder / "tokenizer_config.json").is_file() else {}
    data = {k: tok[v] for k, v in (("src_lang", "source_lang"), ("tgt_lang", "target_lang")) if tok.get(v)}
    record = {"format": "huggingface", "source": str(source), "vocabulary": len(pieces)}
    return write_checkpoint(
        out, model.eval(), spm_bytes=src_bytes, target_spm_bytes=tgt_bytes, record=record, data=data
    )
