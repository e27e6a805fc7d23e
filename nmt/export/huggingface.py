"""`nmt export huggingface`: an nmt checkpoint as a ``transformers`` MarianMTModel + MarianTokenizer.

    from transformers import pipeline
    pipeline("translation", model="OUT_DIR")("A dog runs.")

HF Marian is the same post-norm Transformer (fairseq parameter names, embeddings scaled by
sqrt(d_model), tied shared embeddings, ReLU FFN, zero ``final_logits_bias``), with one layout
difference: its sinusoidal table puts all sines in the first half of the model dimension and all
cosines in the second ([sin | cos]), where nmt interleaves them (section 3.5: column 2i sin, 2i+1
cos). A fixed permutation ``perm`` of the model dimension (HF column j = nmt column perm[j]),
applied to every weight that reads or writes the residual stream (embeddings; q/k/v/fc1 inputs;
out_proj/fc2 outputs and biases; every LayerNorm gain and bias), is an exact re-parametrisation:
LayerNorm, residual sums and x W^T are equivariant under it and the logits x E^T are invariant.

Special ids are nmt's (nmt.vocab): pad 0, unk 1, BOS 2 = ``decoder_start_token_id``, EOS 3. The
tokenizer's source.spm is the checkpoint's spm.model, its target.spm the checkpoint's target_spm.model
where it has one (an imported Marian model's), else spm.model too; vocab.json lists their pieces.
Marian has no pre-norm variant, only sinusoidal positions and no restricted self-attention, so such
models are refused.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import torch

from ..vocab import BOS, EOS, PAD, SPM, TARGET_SPM, UNK, load_spm
from .ctranslate2 import (
    HF_README_TITLE,
    ExportError,
    check_full_attention,
    check_head_size,
    check_left_to_right,
    check_out_dir,
)


def import_transformers():
    try:
        import transformers
    except ImportError:
        raise ExportError("transformers is not installed: pip install 'nmt[hf]'") from None
    return transformers


def halves_permutation(d_model: int) -> torch.Tensor:
    """perm (D,): HF Marian column j holds nmt column perm[j] ([0, 2, 4, ..., 1, 3, 5, ...])."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def permuted_state(model, perm: torch.Tensor) -> dict[str, torch.Tensor]:
    """nmt weights renamed to MarianMTModel's and permuted along the model dimension."""
    out = {}
    for name, t in model.state_dict().items():
        t = t.detach().float().cpu()
        if name.endswith("embed_positions.weight"):
            continue  # Marian builds the same table itself, in [sin | cos] layout
        if name == "decoder.output_bias":
            continue  # final_logits_bias (to_marian): indexed by token, not by the model dimension
        if name.endswith("embed_tokens.weight"):  # one shared table (checked by to_marian)
            out["model.shared.weight"] = t[:, perm]  # (W, D): columns are the model dimension
            continue
        leaf = name.rsplit(".", 2)[-2]  # e.g. q_proj, fc2, self_attn_layer_norm
        if leaf in ("q_proj", "k_proj", "v_proj", "fc1"):
            t = t[:, perm] if name.endswith("weight") else t  # reads the residual stream
        elif leaf in ("out_proj", "fc2"):
            t = t[perm]  # writes the residual stream: rows (and bias entries)
        elif "layer_norm" in leaf:
            t = t[perm]
        else:
            raise ExportError(f"{name}: no Marian counterpart")
        out["model." + name] = t
    return out


def marian_config(cfg):
    transformers = import_transformers()
    return transformers.MarianConfig(
        vocab_size=cfg.tgt_vocab_size,
        decoder_vocab_size=cfg.tgt_vocab_size,
        max_position_embeddings=cfg.max_positions,
        d_model=cfg.d_model,
        encoder_layers=cfg.encoder_layers,
        decoder_layers=cfg.decoder_layers,
        encoder_attention_heads=cfg.n_heads,
        decoder_attention_heads=cfg.n_heads,
        encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff,
        activation_function=cfg.activation,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        scale_embedding=cfg.scale_embeddings,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        eos_token_id=EOS,
        bos_token_id=BOS,
        decoder_start_token_id=BOS,
    )


def generation_config(cfg):
    """Greedy by default; at the length limit EOS is forced (as nmt.search does)."""
    transformers = import_transformers()
    return transformers.GenerationConfig(
        decoder_start_token_id=BOS,
        bos_token_id=BOS,
        eos_token_id=EOS,
        pad_token_id=PAD,
        forced_eos_token_id=EOS,
        max_length=min(512, cfg.max_positions),
        num_beams=1,
    )


def to_marian(model):
    """A MarianMTModel (eval mode) computing the same function as the nmt ``model``."""
    transformers = import_transformers()
    cfg = model.cfg
    check_head_size(cfg, "HF Marian")
    check_left_to_right(cfg, "HF Marian")
    check_full_attention(cfg, "HF Marian")
    if not cfg.source_eos:
        raise ExportError("HF Marian appends EOS to the source; the model was trained without it")
    if cfg.norm_position != "post" or cfg.positional != "sinusoidal":
        raise ExportError(
            f"HF Marian is post-norm with sinusoidal positions (model has norm_position="
            f"{cfg.norm_position}, positional={cfg.positional})"
        )
    if not (cfg.share_embeddings and cfg.tie_output) or cfg.layer_norm_eps != 1e-5:
        raise ExportError("HF Marian export needs share_embeddings, tie_output and layer_norm_eps=1e-5")
    marian = transformers.MarianMTModel(marian_config(cfg)).eval()
    marian.generation_config = generation_config(cfg)
    state = permuted_state(model, halves_permutation(cfg.d_model))
    bias = model.decoder.output_bias  # ModelConfig.output_bias (an imported Marian model's)
    state["final_logits_bias"] = (
        torch.zeros(1, cfg.tgt_vocab_size) if bias is None else bias.detach().float().cpu()[None]
    )
    missing, unexpected = marian.load_state_dict(state, strict=False)
    missing = [
        m
        for m in missing
        if not m.endswith(("embed_positions.weight", "embed_tokens.weight", "lm_head.weight"))
    ]
    if missing or unexpected:
        raise ExportError(f"Marian weights do not match (missing {missing[:3]}, unexpected {unexpected[:3]})")
    marian.tie_weights()
    return marian


def export_huggingface(checkpoint: str | Path, out_dir: str | Path) -> Path:
    """Write ``out_dir`` (MarianMTModel safetensors + config, MarianTokenizer files, README.md)
    atomically: built in a temporary sibling, then renamed."""
    transformers = import_transformers()
    from ..checkpoint import load_model, resolve_checkpoint

    source = resolve_checkpoint(checkpoint)
    out_dir = Path(out_dir)
    check_out_dir(source, out_dir)
    model, config = load_model(source, device="cpu")
    marian = to_marian(model)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        try:
            sp, _ = load_spm(source), load_spm(source, side="target")  # the same pieces, id for id
        except ValueError as e:
            raise ExportError(str(e)) from None
        if sp.get_piece_size() != model.cfg.tgt_vocab_size or sp.piece_to_id("<unk>") != UNK:
            raise ExportError(f"{source / SPM}: does not match the model's vocabulary")
        marian.save_pretrained(tmp)
        spm_dir = tmp / "_spm"
        spm_dir.mkdir()
        target = TARGET_SPM if (source / TARGET_SPM).is_file() else SPM
        for name, ours in (("source.spm", SPM), ("target.spm", target)):
            shutil.copyfile(source / ours, spm_dir / name)
        vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
        (spm_dir / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        data = config.get("data") or {}
        tok = transformers.MarianTokenizer(
            source_spm=str(spm_dir / "source.spm"),
            target_spm=str(spm_dir / "target.spm"),
            vocab=str(spm_dir / "vocab.json"),
            source_lang=data.get("src_lang"),
            target_lang=data.get("tgt_lang"),
            unk_token="<unk>",
            eos_token="</s>",
            pad_token="<pad>",
            model_max_length=model.cfg.max_positions - 1,
        )
        tok.save_pretrained(tmp)
        shutil.rmtree(spm_dir)
        (tmp / "README.md").write_text(
            f"{HF_README_TITLE}\n\nExported by `nmt export huggingface` from "
            f"`{source}`.\n\n    from transformers import pipeline\n"
            f'    pipeline("translation", model="{out_dir}")("A dog runs.")\n\n'
            "Greedy by default (num_beams=1); nmt's beam search and its length penalty are not HF's.\n",
            encoding="utf-8",
        )
        from ..atomic import replace_dir

        replace_dir(tmp, out_dir)  # an existing export is renamed aside first, never lost
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
