"""`nmt export ctranslate2`: an nmt checkpoint as a CTranslate2 model directory.

Built with CTranslate2's own Python spec API (``ctranslate2.specs.TransformerSpec``), as its fairseq
converter does, so CTranslate2 writes its binary format itself. The directory holds ``model.bin``,
``shared_vocabulary.json`` (or source/target vocabularies), ``config.json``, the SentencePiece model
``spm.model`` (and the target side's ``target_spm.model`` where the checkpoint has one, which the
ctranslate2 engine decodes with), ``nmt_export.json`` (nmt's model configuration, for the ctranslate2
engine), a ``README.md`` saying how to use it, and with a vocabulary shortlist (nmt.infer.shortlist)
its vocabulary map ``vmap.txt`` (``translate_batch(..., use_vmap=True)``).

Mapping (our names are fairseq's, so it is a list of assignments):
  * embeddings scaled by sqrt(d_model) (``scale_embeddings``), the decoder starts with BOS, the
    source gets EOS appended (``add_source_eos``), ``<pad>`` is called ``<blank>`` (CTranslate2's
    padding token).
  * Positions: nmt's sinusoidal table interleaves sin and cos (section 3.5: column 2i sin, 2i+1 cos)
    while CTranslate2's default table puts sines and cosines in halves, so the table is written
    explicitly from ``PositionalEncoding.weight`` (learned tables likewise).
  * q/k/v projections are fused as CTranslate2 expects (self-attention: qkv; cross-attention: q, kv).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from pathlib import Path

from ..errors import UserError
from ..vocab import SPM, TARGET_SPM

QUANTIZATIONS = ("int8", "int8_float32", "float16", "bfloat16")


class ExportError(UserError):
    """A checkpoint that cannot be exported (missing extra, unsupported configuration)."""


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise ExportError(
            "ctranslate2 is not installed: pip install 'nmt[ct2]' (ctranslate2==4.8.5)"
        ) from None
    return ctranslate2


def check_head_size(cfg, target: str) -> None:
    """CTranslate2 and HF Marian derive the head size as d_model / n_heads."""
    if cfg.d_k != cfg.d_v or cfg.d_k * cfg.n_heads != cfg.d_model:
        raise ExportError(
            f"{target} needs d_k = d_v = d_model / n_heads (model has d_model={cfg.d_model}, "
            f"n_heads={cfg.n_heads}, d_k={cfg.d_k}, d_v={cfg.d_v})"
        )


def vocabulary(sp) -> list[str]:
    """The SentencePiece pieces in id order, with CTranslate2's name for padding."""
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())]
    return ["<blank>" if p == "<pad>" else p for p in pieces]


def check_left_to_right(cfg, target: str) -> None:
    """ExportError for a right-to-left model (ModelConfig.right_to_left): ``target`` would write
    its outputs reversed; such a model serves to rerank (`nmt translate --rerank`)."""
    if cfg.right_to_left:
        raise ExportError(
            f"a right-to-left model (model.right_to_left) would write reversed outputs in {target}; "
            "it serves to rerank a left-to-right model's n-best (nmt translate --rerank)"
        )


def check_full_attention(cfg, target: str) -> None:
    """ExportError for restricted self-attention (section 4, ModelConfig.attention_window):
    ``target`` has no such window, so every query would see every key and the outputs differ."""
    if cfg.attention_window is not None:
        raise ExportError(
            f"{target} has no restricted self-attention (model.attention_window="
            f"{cfg.attention_window}): every query would see every key; translate with nmt's engine"
        )


HF_README_TITLE = "# Hugging Face export of an nmt checkpoint"  # the first line of an HF export's README.md


def check_out_dir(source: Path, out_dir: Path) -> None:
    """ExportError unless ``out_dir`` may be written: it is not the checkpoint ``source``, a
    directory holding it or inside it, and if it exists it is an empty directory or an earlier nmt
    export (``nmt_export.json``, or an HF export's README.md), which is then replaced."""
    src, target = source.resolve(), out_dir.resolve()
    why = None
    if target == src or target in src.parents:
        why = f"is the checkpoint {source} or a directory holding it"
    elif src in target.parents:
        why = f"is inside the checkpoint {source}"
    elif out_dir.exists() or out_dir.is_symlink():
        readme = out_dir / "README.md"
        earlier = out_dir.is_dir() and (
            not any(out_dir.iterdir())
            or (out_dir / "nmt_export.json").is_file()
            or (
                readme.is_file()
                and readme.read_text(encoding="utf-8", errors="replace").startswith(HF_README_TITLE)
            )
        )
        if not earlier:
            why = "exists and is not an nmt export"
    if why is not None:
        raise ExportError(f"OUT_DIR {out_dir}: {why}; choose a new directory")


def build_spec(model, vocab: list[str]):
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights (numpy float32) and the
    shared ``vocab`` (pieces in id order, see ``vocabulary``)."""
    check_left_to_right(model.cfg, "CTranslate2")
    check_full_attention(model.cfg, "CTranslate2")

    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    check_head_size(cfg, "CTranslate2")
    if len(vocab) != cfg.tgt_vocab_size or len(vocab) != cfg.src_vocab_size:
        raise ExportError(
            f"SentencePiece model has {len(vocab)} pieces, the model "
            f"{cfg.src_vocab_size}/{cfg.tgt_vocab_size}: separate vocabularies are not supported"
        )
    activation = {
        "relu": common_spec.Activation.RELU,
        "gelu": common_spec.Activation.GELU,
        "silu": common_spec.Activation.SWISH,
    }[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config(
        (cfg.encoder_layers, cfg.decoder_layers),
        cfg.n_heads,
        pre_norm=cfg.norm_position == "pre",
        activation=activation,
    )
    enc, dec = model.encoder, model.decoder
    _set_encoder(spec.encoder, enc)
    _set_decoder(spec.decoder, dec)
    if cfg.norm_position == "pre":
        _set_norm(spec.encoder.layer_norm, enc.layer_norm)
        _set_norm(spec.decoder.layer_norm, dec.layer_norm)
    out = dec.embed_tokens.weight if dec.output_projection is None else dec.output_projection.weight
    spec.decoder.projection.weight = _array(out)  # logits = x W^T (tied: the embedding)
    bias = dec.output_bias if dec.output_projection is None else dec.output_projection.bias
    if bias is not None:  # ModelConfig.output_bias (imported Marian and OpenNMT-py models)
        spec.decoder.projection.bias = _array(bias)
    _set_vocabulary(spec, vocab, cfg)
    return spec


def _set_encoder(s, encoder) -> None:
    """The encoder's embeddings, positions and layers (self-attention, feed-forward)."""
    _set_inputs(s, encoder)
    for s_layer, layer in zip(s.layer, encoder.layers):
        _set_attention(s_layer.self_attention, layer.self_attn, self_attention=True)
        _set_norm(s_layer.self_attention.layer_norm, layer.self_attn_layer_norm)
        _set_ffn(s_layer.ffn, layer)


def _set_decoder(s, decoder) -> None:
    """The decoder's embeddings, positions and layers (self-attention, encoder-decoder attention,
    feed-forward); the output projection is set by build_spec."""
    _set_inputs(s, decoder)
    for s_layer, layer in zip(s.layer, decoder.layers):
        _set_attention(s_layer.self_attention, layer.self_attn, self_attention=True)
        _set_norm(s_layer.self_attention.layer_norm, layer.self_attn_layer_norm)
        _set_attention(s_layer.attention, layer.encoder_attn, self_attention=False)
        _set_norm(s_layer.attention.layer_norm, layer.encoder_attn_layer_norm)
        _set_ffn(s_layer.ffn, layer)


def _set_vocabulary(spec, vocab: list[str], cfg) -> None:
    """The shared vocabulary and the special tokens: the decoder starts with BOS, the source gets
    EOS appended (as nmt's)."""
    spec.register_source_vocabulary(vocab)
    spec.register_target_vocabulary(vocab)
    spec.config.bos_token, spec.config.eos_token, spec.config.unk_token = "<s>", "</s>", "<unk>"
    spec.config.decoder_start_token = "<s>"  # nmt's decoder input starts with BOS
    spec.config.add_source_eos = cfg.source_eos
    spec.config.add_source_bos = False
    spec.config.layer_norm_epsilon = cfg.layer_norm_eps


def _array(t):
    """A tensor as a float32 numpy array."""
    return t.detach().float().cpu().numpy()


def _set_linear(s, m) -> None:
    s.weight = _array(m.weight)
    if m.bias is not None:
        s.bias = _array(m.bias)


def _set_norm(s, m) -> None:
    s.gamma, s.beta = _array(m.weight), _array(m.bias)


def _set_attention(s, m, *, self_attention: bool) -> None:
    """q/k/v fused as CTranslate2 expects: self-attention one qkv; cross-attention q, then kv."""
    from ctranslate2.converters import utils
    from ctranslate2.specs import common_spec

    parts = [common_spec.LinearSpec() for _ in range(3)]
    for p, proj in zip(parts, (m.q_proj, m.k_proj, m.v_proj)):
        _set_linear(p, proj)
    if self_attention:
        utils.fuse_linear(s.linear[0], parts)
    else:
        s.linear[0].weight, s.linear[0].bias = parts[0].weight, parts[0].bias
        utils.fuse_linear(s.linear[1], parts[1:])
    _set_linear(s.linear[-1], m.out_proj)


def _set_ffn(s, layer) -> None:
    _set_norm(s.layer_norm, layer.final_layer_norm)
    _set_linear(s.linear_0, layer.fc1)
    _set_linear(s.linear_1, layer.fc2)


def _set_inputs(s, side) -> None:
    """Token embeddings (scaled by sqrt(d_model)) and the explicit position table."""
    import numpy as np

    emb = s.embeddings[0] if isinstance(s.embeddings, list) else s.embeddings
    emb.weight = _array(side.embed_tokens.weight)
    s.scale_embeddings = side.embed.scale != 1.0  # x * sqrt(d_model) (section 3.4)
    s.position_encodings.encodings = np.ascontiguousarray(_array(side.embed.embed_positions.weight))


SHORTLIST_README = """
It carries a vocabulary shortlist: `shortlist.txt` (nmt's) and `vmap.txt`, CTranslate2's
vocabulary map of it (`translate_batch(..., use_vmap=True)`: each batch searches only the target
pieces its sources' pieces list). `nmt translate` and `nmt serve` search with it by default
(`--no-shortlist`: the full vocabulary).
"""

README = """# CTranslate2 export of an nmt checkpoint

Exported by `nmt export ctranslate2` from `{source}` (quantization: {quantization}).

    nmt translate {out} --engine ctranslate2 -i input.txt   # or Translator.load(..., engine="ctranslate2")

or directly (source pieces from `spm.model`; CTranslate2 appends EOS and starts with BOS itself):

    import ctranslate2, sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file="{out}/spm.model")
    tr = ctranslate2.Translator("{out}", device="cpu")
    res = tr.translate_batch([sp.encode("A dog runs.", out_type=str)], beam_size=4, length_penalty=0.6)
    print(sp.decode(res[0].hypotheses[0]))
"""


def export_model(
    model,
    vocab: list[str],
    out_dir: str | Path,
    *,
    quantization: str | None = None,
    spm_model: str | Path | None = None,
    source: str = "",
    shortlist=None,
) -> Path:
    """Write the CTranslate2 directory of ``model`` (an nmt Transformer) and its ``vocab`` (pieces
    in id order) atomically: built in a temporary sibling, then renamed (an existing ``out_dir`` is
    replaced only once the new one is complete). ``shortlist`` (nmt.infer.shortlist.Shortlist):
    also its vocabulary map, vmap.txt."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"--quantization {quantization}: choose from {', '.join(QUANTIZATIONS)}")
    spec = build_spec(model, vocab)
    spec.validate()
    spec.optimize(quantization=quantization)
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        spec.save(str(tmp))
        if shortlist is not None:  # its vocabulary map, and the shortlist itself (of_checkpoint)
            from ..infer.shortlist import CHECKPOINT_FILE, dumps, vmap_text

            (tmp / "vmap.txt").write_text(vmap_text(shortlist, vocab), encoding="utf-8")
            (tmp / CHECKPOINT_FILE).write_text(dumps(shortlist), encoding="utf-8")
        if spm_model is not None:
            shutil.copyfile(spm_model, tmp / SPM)
            if (Path(spm_model).parent / TARGET_SPM).is_file():  # the target side's own (nmt.vocab)
                shutil.copyfile(Path(spm_model).parent / TARGET_SPM, tmp / TARGET_SPM)
        readme = README.format(source=source, quantization=quantization or "none (float32)", out=out_dir)
        (tmp / "README.md").write_text(
            readme + (SHORTLIST_README if shortlist is not None else ""), encoding="utf-8"
        )
        (tmp / "nmt_export.json").write_text(
            json.dumps(
                {
                    "source": source,
                    "quantization": quantization or "float32",
                    "model": dataclasses.asdict(model.cfg),
                },
                indent=2,
            )
            + "\n"
        )
        from ..atomic import replace_dir

        replace_dir(tmp, out_dir)  # an existing export is renamed aside first, never lost
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir


def carried_shortlist(source: Path, sp, cfg):
    """The Shortlist a checkpoint carries (nmt.infer.shortlist.of_checkpoint), checked against its
    model, or None; ExportError for a bad one."""
    from ..infer.shortlist import ShortlistError, for_translator, of_checkpoint

    path = of_checkpoint(source)
    if path is None:
        return None
    try:
        return for_translator(path, sp, cfg)
    except ShortlistError as e:
        raise ExportError(str(e)) from None


def export_ctranslate2(
    checkpoint: str | Path,
    out_dir: str | Path,
    *,
    quantization: str | None = None,
    shortlist=None,
    own_shortlist: bool = True,
) -> Path:
    """`nmt export ctranslate2`: the checkpoint's model, vocabulary and SentencePiece model (and
    ``shortlist``'s vocabulary map, see export_model; None: the checkpoint's own shortlist, where
    it carries one and ``own_shortlist``)."""
    from ..checkpoint import load_model, resolve_checkpoint
    from ..vocab import load_spm

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(f"--quantization {quantization}: choose from {', '.join(QUANTIZATIONS)}")
    import_ctranslate2()
    source = resolve_checkpoint(checkpoint)
    check_out_dir(source, Path(out_dir))
    model, _ = load_model(source, device="cpu")
    sp = load_spm(source)
    if shortlist is None and own_shortlist:
        shortlist = carried_shortlist(source, sp, model.cfg)
    return export_model(
        model,
        vocabulary(sp),
        out_dir,
        quantization=quantization,
        spm_model=source / "spm.model",
        source=str(source),
        shortlist=shortlist,
    )
