"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), batch-first.

Axis legend used in the shape comments:
    B batch, S source length, T target length (new tokens in a decoding step), P target positions
    already in the cache, D d_model, H n_heads, K d_k, V d_v (per head), F d_ff, W vocabulary size.

Interface (search and training live elsewhere and call it):
    memory = model.encode(src_tokens)                              # EncoderOut
    logits, cache = model.decode_step(tgt_tokens, memory, cache)   # cache: DecoderCache | None
    logits = model(src_tokens, tgt_in)                             # training, teacher forcing
Parameter names follow fairseq/Marian (embed_tokens, self_attn, encoder_attn, fc1, fc2, q_proj...).
Attention (section 3.2) is in nmt.attention; the decoding state in nmt.cache; CPU speed paths beside
the concepts they speed up: nmt.explicit_attention (bf16 training), nmt.fused_projections
(inference), nmt.dropout's masks."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import MultiheadAttention, window_mask
from .cache import DecoderCache, EncoderOut, LayerCache
from .config import ModelConfig
from .dropout import Dropout
from .vocab import PAD


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same). On the meta
    device (a model's size counted: nmt.checkpoint.parameter_bytes) its shape only: arange there goes
    through torch._refs, whose first call imports torch._dynamo (over a second of a process)."""
    if torch.get_default_device().type == "meta":
        return torch.empty(n_positions, d_model)
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]  # (1, D/2)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, D/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


def sublayer_connection(x: Tensor, sublayer, norm: nn.LayerNorm, dropout: Dropout, pre: bool) -> Tensor:
    """Section 5.4 post-norm: LayerNorm(x + Dropout(Sublayer(x))). With norm_position='pre'
    (not the paper): x + Dropout(Sublayer(LayerNorm(x)))."""
    if pre:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


def feed_forward(x: Tensor, layer: EncoderLayer | DecoderLayer) -> Tensor:
    """Section 3.3, eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2 at every position, with the layer's
    W1, b1 (``fc1``), W2, b2 (``fc2``), ReLU (or GELU, SiLU: not the paper) and dropout on the activation
    (0 in the paper). (B, T, D) -> (B, T, F) -> (B, T, D)."""
    return layer.fc2(layer.activation_dropout(layer.activation(layer.fc1(x))))


# the feed-forward activation (eq. 2: ReLU); GELU and SiLU (Marian's swish, x sigmoid(x)) are not the paper's
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def layer_norm(cfg: ModelConfig) -> nn.LayerNorm:
    return nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)


def multihead_attention(cfg: ModelConfig) -> MultiheadAttention:
    return MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.attention_dropout)


class EncoderLayer(nn.Module):
    """Section 3.1, Figure 1 (left): self-attention, then the position-wise feed-forward network
    (section 3.3), each in a residual connection with LayerNorm (section 5.4). The FFN's parameters
    are the layer's own ``fc1``, ``fc2``, ``final_layer_norm`` (fairseq's names)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.self_attn_layer_norm = multihead_attention(cfg), layer_norm(cfg)
        # the feed-forward network (eq. 2); nmt.infer.packed may fuse a ReLU into fc1
        self.fc1, self.fc2 = nn.Linear(cfg.d_model, cfg.d_ff), nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]
        self.activation_dropout, self.final_layer_norm = Dropout(cfg.activation_dropout), layer_norm(cfg)
        self.dropout, self.pre = Dropout(cfg.dropout), cfg.norm_position == "pre"  # post-norm: the paper

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, D), mask (B, 1, 1, S) True = attend -> (B, S, D)."""
        x = sublayer_connection(
            x, lambda h: self.self_attn(h, h, mask=mask), self.self_attn_layer_norm, self.dropout, self.pre
        )
        return sublayer_connection(
            x, lambda h: feed_forward(h, self), self.final_layer_norm, self.dropout, self.pre
        )


class DecoderLayer(nn.Module):
    """Section 3.1, Figure 1 (right): masked self-attention, encoder-decoder attention (section
    3.2.3), then the position-wise feed-forward network (section 3.3), each in a residual connection
    with LayerNorm (section 5.4). The FFN's parameters are named as in ``EncoderLayer``."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn, self.self_attn_layer_norm = multihead_attention(cfg), layer_norm(cfg)
        self.encoder_attn, self.encoder_attn_layer_norm = multihead_attention(cfg), layer_norm(cfg)
        self.fc1, self.fc2 = nn.Linear(cfg.d_model, cfg.d_ff), nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = ACTIVATIONS[cfg.activation]
        self.activation_dropout, self.final_layer_norm = Dropout(cfg.activation_dropout), layer_norm(cfg)
        self.dropout, self.pre = Dropout(cfg.dropout), cfg.norm_position == "pre"  # post-norm: the paper

    def forward(
        self,
        x: Tensor,
        memory_kv: tuple[Tensor, Tensor],
        *,
        memory_mask: Tensor,
        self_mask: Tensor | None,
        is_causal: bool,
        group: int = 1,
        cache: LayerCache | None = None,
        start: int = 0,
    ) -> Tensor:
        """x (N, T, D) at positions start..start+T-1 -> (N, T, D); ``memory_kv``: keys (M, H, S, K) and
        values (M, H, S, V) of the memory, a row for ``group`` rows of x; ``memory_mask`` (M, 1, 1, S).
        With ``cache`` (decoding) the T new keys/values are written into its buffers (they have room)
        and the queries see every position written; without (training) the T positions only."""

        def self_attention(h: Tensor) -> Tensor:
            q, k, v = self.self_attn.project_qkv(h)  # (N, H, T, K), (N, H, T, K), (N, H, T, V)
            if cache is not None:
                end = start + k.size(2)
                cache.self_k[:, start:end] = k.transpose(1, 2)  # (N, T, H, K): the projection's own layout
                cache.self_v[:, start:end] = v.transpose(1, 2)
                if start > 0:  # the cached prefix and the new positions: keys (N, H, P+T, K), strided
                    k, v = cache.self_k[:, :end].transpose(1, 2), cache.self_v[:, :end].transpose(1, 2)
            return self.self_attn.attend_heads(q, k, v, mask=self_mask, is_causal=is_causal)

        def encoder_attention(h: Tensor) -> Tensor:
            n, t, d = h.shape
            # the group of rows sharing a memory row attend to its keys together: (M, group*T, D)
            out = self.encoder_attn.attend(
                h.reshape(n // group, group * t, d), *memory_kv, mask=memory_mask
            )  # (M, group*T, D)
            return out.view(n, t, d)  # (N, T, D)

        x = sublayer_connection(x, self_attention, self.self_attn_layer_norm, self.dropout, self.pre)
        x = sublayer_connection(x, encoder_attention, self.encoder_attn_layer_norm, self.dropout, self.pre)
        return sublayer_connection(
            x, lambda h: feed_forward(h, self), self.final_layer_norm, self.dropout, self.pre
        )


class PositionalEncoding(nn.Module):
    """Section 3.5: the sinusoidal table (a buffer, not a parameter) or, as the paper's Table 3
    row (E), a learned table (``weight``, fairseq's ``embed_positions.weight``)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.max_positions = cfg.max_positions
        if cfg.positional == "learned":
            self.weight = nn.Parameter(torch.empty(cfg.max_positions, cfg.d_model))
            nn.init.normal_(self.weight, mean=0.0, std=cfg.d_model**-0.5)
        else:
            self.register_buffer(
                "weight", sinusoidal_table(cfg.max_positions, cfg.d_model), persistent=False
            )  # (max_positions, D)

    def forward(self, start: int, length: int) -> Tensor:
        """Positions start..start+length-1 -> (length, D)."""
        end = start + length
        if end > self.max_positions:
            raise ValueError(f"sequence of length {end} exceeds model.max_positions={self.max_positions}")
        return self.weight[start:end]


class Embedding(nn.Module):
    """Sections 3.4, 3.5, 5.4: dropout(embed_tokens(x) * sqrt(d_model) + PE). Owns the positions and
    holds the token table it is given (one table may be shared by both sides and the output)."""

    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens, self.embed_positions = embed_tokens, PositionalEncoding(cfg)
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.dropout = Dropout(cfg.dropout)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """tokens (B, T) at positions start..start+T-1 -> (B, T, D)."""
        positions = self.embed_positions(start, tokens.size(1))  # (T, D)
        return self.dropout(self.embed_tokens(tokens) * self.scale + positions)  # (B, T, D)


class Encoder(nn.Module):
    """Section 3.1: the embedded source (sections 3.4, 3.5) through a stack of N identical
    ``EncoderLayer``s. Pre-norm stacks (not the paper) end with a LayerNorm; post-norm ones are
    normalised already. With ``attention_window`` r: restricted self-attention (section 4)."""

    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens  # the (maybe shared) table: parameter name encoder.embed_tokens
        self.embed = Embedding(cfg, embed_tokens)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.window = cfg.attention_window
        self.layer_norm = layer_norm(cfg) if cfg.norm_position == "pre" else None

    def forward(self, src_tokens: Tensor, padding_mask: Tensor) -> Tensor:
        """src_tokens (B, S), padding_mask (B, S) True = padding -> (B, S, D)."""
        x = self.embed(src_tokens)  # (B, S, D)
        mask = ~padding_mask[:, None, None, :]  # (B, 1, 1, S), True = attend
        if self.window is not None:  # restricted self-attention: and |i - j| <= r
            s = src_tokens.size(1)
            band = window_mask(s, s, start=0, window=self.window, causal=False, device=src_tokens.device)
            # a padding query far past the sentence would see no key at all (NaN): let every
            # query see itself, which changes nothing for real tokens (their own key is in the band)
            eye = torch.eye(s, dtype=torch.bool, device=src_tokens.device)  # (S, S)
            mask = (mask & band) | eye  # (B, 1, S, S)
        for layer in self.layers:
            x = layer(x, mask)
        return self.layer_norm(x) if self.layer_norm is not None else x


class Decoder(nn.Module):
    """Section 3.1: the embedded target through a stack of N identical ``DecoderLayer``s, then the
    output projection to the vocabulary (section 3.4: the embedding matrix itself when tied).
    ``forward`` is teacher forcing (training: no cache); ``step`` decodes with a DecoderCache."""

    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.cfg, self.embed_tokens = cfg, embed_tokens
        self.embed = Embedding(cfg, embed_tokens)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.layer_norm = layer_norm(cfg) if cfg.norm_position == "pre" else None
        # tied (section 3.4): None, logits = x @ embed_tokens.weight^T (+ output_bias: not the paper)
        self.output_projection = (
            None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)
        )
        tied_bias = cfg.output_bias and cfg.tie_output
        self.output_bias = nn.Parameter(torch.zeros(cfg.tgt_vocab_size)) if tied_bias else None  # (W,)

    def empty_cache(self, memory: EncoderOut, capacity: int = 16) -> DecoderCache:
        """The cache before the first step: the memory's keys/values computed once per memory row
        and empty self-attention buffers of ``capacity`` positions (nmt.cache.DecoderCache.empty)."""
        memory_kv = [layer.encoder_attn.project_kv(memory.out) for layer in self.layers]  # (M, H, S, K/V)
        return DecoderCache.empty(memory_kv, memory, capacity)

    def self_attention_mask(self, t: int, start: int, device: torch.device) -> tuple[Tensor | None, bool]:
        """(mask (T, start+T) True = attend, or None; is_causal) for T queries at start..start+T-1:
        query i sees keys 0..start+i (section 3.2.3), within the window when restricted (section 4)."""
        if self.cfg.attention_window is not None:  # keys p+i-r .. p+i only: the band hides older cached keys
            return window_mask(
                t, start + t, start=start, window=self.cfg.attention_window, causal=True, device=device
            ), False  # (T, P+T)
        if t == 1 or start == 0:  # one new token sees every cached position; from 0: SDPA's causal path
            return None, t > 1
        return torch.ones(t, start + t, dtype=torch.bool, device=device).tril(start), False  # (T, P+T)

    def forward(self, tokens: Tensor, memory: EncoderOut, *, select: Tensor | None = None) -> Tensor:
        """Teacher forcing: tokens (N, T) from position 0 -> logits (N, T, W). With ``select``
        (bool (N, T)) only the selected positions are projected: logits (K, W), K = select.sum(),
        in row-major order (training skips the padding this way)."""
        memory_kv = [layer.encoder_attn.project_kv(memory.out) for layer in self.layers]  # (M, H, S, K/V)
        x = self.run_layers(tokens, memory_kv, memory_mask=memory.attend_mask(), group=memory.group)
        return self.output(x if select is None else x[select])  # (K, D) selected

    def step(
        self, tokens: Tensor, cache: DecoderCache, *, projection: nn.Module | None = None
    ) -> tuple[Tensor, DecoderCache]:
        """tokens (N, T) following the P cached positions -> logits (N, T, W), updated cache (the
        memory is read through it: ``empty_cache``). ``projection``: see ``output``."""
        cache = cache.with_room(tokens)
        memory_kv = [(c.cross_k, c.cross_v) for c in cache.layers]
        x = self.run_layers(
            tokens,
            memory_kv,
            memory_mask=cache.memory_mask,
            group=cache.group,
            caches=cache.layers,
            start=cache.length,
        )  # (N, T, D)
        return self.output(x, projection), cache.advanced(tokens.size(1))

    def run_layers(
        self,
        tokens: Tensor,
        memory_kv: list[tuple[Tensor, Tensor]],
        *,
        memory_mask: Tensor,
        group: int,
        caches: list[LayerCache] | None = None,
        start: int = 0,
    ) -> Tensor:
        """tokens (N, T) at positions start..start+T-1 through the stack -> (N, T, D)."""
        x = self.embed(tokens, start=start)  # (N, T, D)
        self_mask, is_causal = self.self_attention_mask(tokens.size(1), start, tokens.device)
        for i, layer in enumerate(self.layers):
            x = layer(
                x,
                memory_kv[i],
                memory_mask=memory_mask,
                self_mask=self_mask,
                is_causal=is_causal,
                group=group,
                cache=None if caches is None else caches[i],
                start=start,
            )
        return self.layer_norm(x) if self.layer_norm is not None else x

    def output(self, x: Tensor, projection: nn.Module | None = None) -> Tensor:
        """(..., D) -> logits (..., W); ``projection``: an output layer used instead of the model's,
        (..., D) -> (..., W') (a vocabulary shortlist's rows, nmt.infer.shortlist)."""
        projection = self.output_projection if projection is None else projection  # a module: maybe int8
        if projection is None:  # tied
            return F.linear(x, self.embed_tokens.weight, self.output_bias)  # (..., W)
        return projection(x)  # (..., W)


class Transformer(nn.Module):
    """Section 3, Figure 1: the encoder-decoder Transformer. One token table serves the source,
    the target and the output projection when ``share_embeddings`` / ``tie_output`` (section 3.4)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=PAD)
        tgt_embed = (
            src_embed
            if cfg.share_embeddings
            else nn.Embedding(cfg.tgt_vocab_size, cfg.d_model, padding_idx=PAD)
        )
        self.encoder = Encoder(cfg, src_embed)
        self.decoder = Decoder(cfg, tgt_embed)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform for every projection matrix, zero biases (as tensor2tensor and fairseq);
        embeddings N(0, d_model^-0.5) so that after the sqrt(d_model) scale they have unit variance;
        LayerNorm gain 1, bias 0."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.d_model**-0.5)
                if module.padding_idx is not None:
                    nn.init.zeros_(module.weight[module.padding_idx])
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def encode(self, src_tokens: Tensor) -> EncoderOut:
        """src_tokens (B, S), padded with nmt.vocab.PAD -> EncoderOut((B, S, D), padding mask (B, S))."""
        padding_mask = src_tokens.eq(PAD)  # (B, S), True = padding
        return EncoderOut(self.encoder(src_tokens, padding_mask), padding_mask)

    def decode_step(
        self,
        tgt_tokens: Tensor,
        memory: EncoderOut,
        cache: DecoderCache | None = None,
        projection: nn.Module | None = None,
    ) -> tuple[Tensor, DecoderCache]:
        """Feed the next target tokens (B, T) (usually T=1) -> logits (B, T, W), new cache.
        With ``cache=None`` the cross-attention keys/values are computed from ``memory`` once and
        the tokens are taken to start at position 0. ``projection``: see Decoder.output."""
        if cache is None:
            cache = self.decoder.empty_cache(memory, capacity=max(16, tgt_tokens.size(1)))
        return self.decoder.step(tgt_tokens, cache, projection=projection)

    def forward(self, src_tokens: Tensor, tgt_in: Tensor, select: Tensor | None = None) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in = BOS + target (B, T) -> logits (B, T, W); with
        ``select`` (bool (B, T)) the logits of the selected positions only, (K, W)."""
        return self.decoder(tgt_in, self.encode(src_tokens), select=select)
