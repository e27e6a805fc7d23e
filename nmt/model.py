"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), batch-first.

Axis legend used in the shape comments:
    B batch, S source length, T target length (new tokens in a decoding step), P target positions
    already in the cache, D d_model, H n_heads, K d_k, V d_v (per head), F d_ff, W vocabulary size.

Interface (search and training live elsewhere and call it):
    memory = model.encode(src_tokens)                              # EncoderOut
    logits, cache = model.decode_step(tgt_tokens, memory, cache)   # cache: DecoderCache | None
    logits = model(src_tokens, tgt_in)                             # training, teacher forcing
Parameter names follow fairseq/Marian (embed_tokens, self_attn, encoder_attn, fc1, fc2, q_proj...).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .config import ModelConfig
from .dropout import Dropout, dropout
from .vocab import PAD


def sinusoidal_table(n_positions: int, d_model: int) -> Tensor:
    """Section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)[None, :]  # (1, D/2)
    angle = pos / torch.pow(10000.0, two_i / d_model)  # (P, D/2)
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle)
    return table.float()


def shared_rows(indices: Tensor, group: int) -> tuple[Tensor, int]:
    """Rows ``indices`` (N',) of a batch whose rows come in runs of ``group`` sharing one memory
    row (the beams of a sentence) -> (memory rows to keep (M',), new group size). The new rows keep
    sharing when they come in equal runs of one memory row (beam reordering, dropping sentences,
    expanding to beams); otherwise each gets its own memory row (group 1)."""
    memory_rows = indices // group  # (N',) memory row of each new row
    runs, counts = torch.unique_consecutive(memory_rows, return_counts=True)  # (M',), (M',)
    if counts.numel() and bool((counts == counts[0]).all()):
        return runs, int(counts[0])
    return memory_rows, 1


def select_rows(x: Tensor, rows: Tensor) -> Tensor:
    """x.index_select(0, rows), or x itself when ``rows`` is 0..len(x)-1 (nothing to copy)."""
    if rows.numel() == x.size(0) and torch.equal(rows, torch.arange(x.size(0), device=rows.device)):
        return x
    return x.index_select(0, rows)


def moved_rows(indices: Tensor) -> Tensor:
    """The rows i with indices[i] != i (R,): those a reorder by ``indices`` (N',) changes."""
    return indices.ne(torch.arange(indices.numel(), device=indices.device)).nonzero().squeeze(1)


def take_rows_(x: Tensor, indices: Tensor, filled: int | None = None, moved: Tensor | None = None) -> Tensor:
    """``x.index_select(0, indices)`` for a caller that gives ``x`` up: row i takes row
    ``indices[i]`` (N' <= N) in place, rows with indices[i] == i are not copied (all sources are
    read before any row is written), and the first N' rows are returned (a view). ``filled``: only
    positions :filled of dimension 1 hold data (a self-attention buffer (N, C, H, K)); ``moved``:
    ``moved_rows(indices)`` when the caller has it (several tensors taken by the same indices).
    Where it cannot apply (N' > N, autograd) a new tensor as index_select."""
    n = indices.numel()
    if n > x.size(0) or (x.requires_grad and torch.is_grad_enabled()):
        return x.index_select(0, indices)
    moved = moved_rows(indices) if moved is None else moved  # (R,) rows that change
    if moved.numel():
        part = x if filled is None else x[:, :filled]
        part.index_copy_(0, moved, part.index_select(0, indices[moved]))  # (R, ...) read, then written
    return x[:n]


@dataclass
class EncoderOut:
    """Encoder memory: ``out`` (M, S, D) and ``padding_mask`` (M, S), True where src is padding.
    Memory row i serves the ``group`` decoder rows i*group..(i+1)*group-1 (the beams of one
    sentence share their memory instead of holding copies)."""

    out: Tensor
    padding_mask: Tensor
    group: int = 1

    def reorder(self, indices: Tensor) -> "EncoderOut":
        """Select/repeat decoder rows ``indices`` (N',), e.g. to expand for beams
        (``arange(B).repeat_interleave(k)``) or to drop finished sentences."""
        rows, group = shared_rows(indices, self.group)
        return EncoderOut(select_rows(self.out, rows), select_rows(self.padding_mask, rows), group)

    def reorder_(self, indices: Tensor) -> "EncoderOut":
        """``reorder`` for a caller that will not use this memory again (see ``take_rows_``)."""
        rows, group = shared_rows(indices, self.group)
        moved = moved_rows(rows)
        return EncoderOut(take_rows_(self.out, rows, moved=moved), take_rows_(self.padding_mask, rows, moved=moved),
                          group)


@dataclass
class LayerCache:
    self_k: Tensor  # (N, C, H, K) keys of the target prefix; the first DecoderCache.length of C are filled
    self_v: Tensor  # (N, C, H, V) (position-major: a row's filled positions are one contiguous block)
    cross_k: Tensor  # (M, H, S, K) computed once per memory row, shared by its group of decoder rows
    cross_v: Tensor  # (M, H, S, V)


@dataclass
class DecoderCache:
    """Explicit decoder state: per-layer keys/values, the number of positions already seen, the
    number ``group`` of decoder rows (N = M * group) sharing each memory row's cross-attention
    keys/values, and the memory mask (M, 1, 1, S), True = attend.

    Self-attention keys/values live in preallocated buffers of capacity C >= length: a step writes
    its new positions in place instead of concatenating. ``extent`` (shared by the caches over the
    same buffers) records how far they are written, so that extending an older cache a second
    time (branching) copies first instead of overwriting the newer one's positions."""

    layers: list[LayerCache]
    length: int
    group: int
    memory_mask: Tensor
    extent: list[int]

    @property
    def capacity(self) -> int:
        return self.layers[0].self_k.size(1) if self.layers else 0

    def reorder(self, indices: Tensor, capacity: int | None = None) -> "DecoderCache":
        """Keep rows ``indices`` (N',) of every cached tensor (beam reordering, pruning), into new
        buffers of ``capacity`` (default: the current one) positions."""
        rows, group = shared_rows(indices, self.group)
        p, cap = self.length, max(capacity or self.capacity, self.length)
        layers = []
        for c in self.layers:
            self_kv = []
            for buf in (c.self_k, c.self_v):
                new = buf.new_empty(indices.size(0), cap, buf.size(2), buf.size(3))  # (N', C, H, K)
                if buf.requires_grad and torch.is_grad_enabled():  # out= is not differentiable
                    new[:, :p] = buf[:, :p].index_select(0, indices)
                else:  # straight into the new buffer, one copy
                    torch.index_select(buf[:, :p], 0, indices, out=new[:, :p])
                self_kv.append(new)
            layers.append(LayerCache(*self_kv, select_rows(c.cross_k, rows), select_rows(c.cross_v, rows)))
        return DecoderCache(layers, p, group, select_rows(self.memory_mask, rows), [p])

    def reorder_(self, indices: Tensor) -> "DecoderCache":
        """``reorder(indices)`` for a caller that will not use this cache again (beam search,
        greedy search): every tensor's rows are taken in place (``take_rows_``: only the rows that
        change are copied) and narrowed to the rows kept, views of the same buffers. Where that
        cannot apply (N' > N, buffers extended by another cache, autograd) it is ``reorder``."""
        n, p = indices.numel(), self.length
        if (not self.layers or n > self.layers[0].self_k.size(0) or self.extent[0] != p
                or (self.layers[0].self_k.requires_grad and torch.is_grad_enabled())):
            return self.reorder(indices)
        rows, group = shared_rows(indices, self.group)  # (M',) memory rows
        moved, moved_memory = moved_rows(indices), moved_rows(rows)  # once for all layers
        layers = [LayerCache(take_rows_(c.self_k, indices, p, moved), take_rows_(c.self_v, indices, p, moved),
                             take_rows_(c.cross_k, rows, moved=moved_memory),
                             take_rows_(c.cross_v, rows, moved=moved_memory)) for c in self.layers]
        return DecoderCache(layers, p, group, take_rows_(self.memory_mask, rows, moved=moved_memory), self.extent)


def window_mask(n_queries: int, n_keys: int, *, start: int, window: int,
                causal: bool, device: torch.device | None = None) -> Tensor:
    """Restricted self-attention (section 4, Table 1): query i, at absolute position start+i, may
    attend key j iff |start + i - j| <= window (and j <= start + i when ``causal``).
    Returns (T, N) bool, True = attend (broadcasts against (B, H, T, N))."""
    q = torch.arange(start, start + n_queries, device=device)[:, None]  # (T, 1)
    k = torch.arange(n_keys, device=device)[None, :]  # (1, N)
    allowed = (q - k).abs() <= window  # (T, N)
    return allowed & (k <= q) if causal else allowed


# Training on CPU in bf16 / fp16 autocast computes attention step by step (scores held, in
# float32) when a head's score matrix has at most this many entries: SDPA's CPU kernel is slow for
# reduced precision. Forward + backward of a recipe batch (40 sentences x 4 heads x 25 x 25
# positions): 1.9 ms against 5.6 ms (bf16); 100 x 100: 3.6 vs 6.6 ms; equal at 200 x 200. In
# float32 SDPA is as fast (0.94-1.2x), so float32 keeps it (benchmarks/attention_train.py).
EXPLICIT_ATTENTION_MAX = 128 * 128


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, is_causal: bool,
                       dropout_p: float) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V in float32, step by step: q (B, H, T, K), k (B, H, N, K),
    v (B, H, N, V); mask (bool, broadcastable to (B, H, T, N), True = attend) or is_causal (key
    j <= query i); dropout on the attention weights. The same function as
    F.scaled_dot_product_attention. Returns (B, H, T, V) in q's dtype."""
    if is_causal and mask is not None:
        raise ValueError("explicit_attention: give mask or is_causal, not both (as SDPA)")
    with torch.autocast(q.device.type, enabled=False):
        qf = q.float() * (q.size(-1) ** -0.5)  # (B, H, T, K)
        scores = torch.matmul(qf, k.float().transpose(-2, -1))  # (B, H, T, N)
        if is_causal:
            t, n = scores.shape[-2:]
            mask = torch.ones(t, n, dtype=torch.bool, device=q.device).tril()  # (T, N)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, N)
        weights = dropout(weights, dropout_p)
        return torch.matmul(weights, v.float()).to(q.dtype)  # (B, H, T, V)


class MultiheadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, scaled dot-product heads.

    ``fused_qkv`` / ``fused_kv`` (None in a model as built) may hold one projection whose weight
    is [W^Q; W^K; W^V] / [W^K; W^V] stacked by rows (nmt.infer.packed sets them for inference:
    one matrix product instead of three or two, the same numbers per output column). They are
    used only where they say they apply to the input (``applies``); else the three projections."""

    def __init__(self, d_model: int, n_heads: int, d_k: int, d_v: int, dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.d_k, self.d_v, self.dropout = n_heads, d_k, d_v, dropout
        self.q_proj = nn.Linear(d_model, n_heads * d_k)
        self.k_proj = nn.Linear(d_model, n_heads * d_k)
        self.v_proj = nn.Linear(d_model, n_heads * d_v)
        self.out_proj = nn.Linear(n_heads * d_v, d_model)
        self.fused_qkv: nn.Module | None = None
        self.fused_kv: nn.Module | None = None

    def _split(self, x: Tensor, d: int) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, d).transpose(1, 2)  # (B, N, H*d) -> (B, H, N, d)

    def project_kv(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(B, N, D) -> keys (B, H, N, K), values (B, H, N, V)."""
        fused = self.fused_kv
        if fused is not None and fused.applies(x):
            k, v = fused(x).split([self.n_heads * self.d_k, self.n_heads * self.d_v], dim=-1)  # (B, N, H*K), (B, N, H*V)
        else:
            k, v = self.k_proj(x), self.v_proj(x)
        return self._split(k, self.d_k), self._split(v, self.d_v)

    def project_qkv(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's projections of one input (B, N, D) -> queries (B, H, N, K), keys
        (B, H, N, K), values (B, H, N, V)."""
        fused = self.fused_qkv
        if fused is not None and fused.applies(x):
            hk = self.n_heads * self.d_k
            q, k, v = fused(x).split([hk, hk, self.n_heads * self.d_v], dim=-1)  # (B, N, H*K) x2, (B, N, H*V)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return self._split(q, self.d_k), self._split(k, self.d_k), self._split(v, self.d_v)

    def attend(self, query: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
               is_causal: bool = False) -> Tensor:
        """query (B, T, D), k (B, H, N, K), v (B, H, N, V); mask broadcastable to (B, H, T, N),
        True where attention is allowed. Returns (B, T, D)."""
        q = self._split(self.q_proj(query), self.d_k)  # (B, H, T, K)
        return self.attend_heads(q, k, v, mask=mask, is_causal=is_causal)

    def attend_heads(self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None,
                     is_causal: bool = False) -> Tensor:
        """Projected queries q (B, H, T, K), k (B, H, N, K), v (B, H, N, V) -> (B, T, D)."""
        b, _, t, _ = q.shape
        dropout_p = self.dropout if self.training else 0.0
        # softmax(Q K^T / sqrt(d_k)) V; the scale is 1/sqrt(K) (the query's last dimension)
        if (q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and torch.is_grad_enabled()
                and t * k.size(2) <= EXPLICIT_ATTENTION_MAX and (mask is None or mask.dtype == torch.bool)):
            out = explicit_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)  # (B, H, T, V)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                                 dropout_p=dropout_p)  # (B, H, T, V)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_v)  # (B, T, H*V)
        return self.out_proj(out)  # (B, T, D)

    def forward(self, query: Tensor, key_value: Tensor, *, mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        if query is key_value:  # self-attention
            q, k, v = self.project_qkv(query)
            return self.attend_heads(q, k, v, mask=mask, is_causal=is_causal)
        k, v = self.project_kv(key_value)
        return self.attend(query, k, v, mask=mask, is_causal=is_causal)


def sublayer_connection(x: Tensor, sublayer, norm: nn.LayerNorm, dropout: Dropout, pre: bool) -> Tensor:
    """Section 5.4 post-norm: LayerNorm(x + Dropout(Sublayer(x))). With norm_position='pre'
    (not the paper): x + Dropout(Sublayer(LayerNorm(x)))."""
    if pre:
        return x + dropout(sublayer(norm(x)))
    return norm(x + dropout(sublayer(x)))


class FeedForwardSublayer(nn.Module):
    """Section 3.3: FFN(x) = max(0, x W1 + b1) W2 + b2, applied at every position.

    A mixin for the encoder and decoder layers: it owns ``fc1``, ``fc2`` and the final LayerNorm
    under the layer's own names (fairseq's ``layers.N.fc1``), so checkpoints and converters see the
    flat names they expect."""

    def _init_feed_forward(self, cfg: ModelConfig) -> None:
        self.fc1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.fc2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.activation = F.relu if cfg.activation == "relu" else F.gelu
        self.activation_dropout = Dropout(cfg.activation_dropout)
        self.final_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def feed_forward(self, x: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, F) -> (B, T, D)."""
        return self.fc2(self.activation_dropout(self.activation(self.fc1(x))))


class EncoderLayer(FeedForwardSublayer, nn.Module):
    """Self-attention and FFN sublayers (Figure 1, left)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self._init_feed_forward(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.pre = cfg.norm_position == "pre"

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, D), mask (B, 1, 1, S) True = attend -> (B, S, D)."""
        x = sublayer_connection(x, lambda h: self.self_attn(h, h, mask=mask), self.self_attn_layer_norm,
                                self.dropout, self.pre)
        return sublayer_connection(x, self.feed_forward, self.final_layer_norm, self.dropout, self.pre)


class DecoderLayer(FeedForwardSublayer, nn.Module):
    """Masked self-attention, encoder-decoder attention and FFN sublayers (Figure 1, right)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.encoder_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.d_k, cfg.d_v, cfg.attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self._init_feed_forward(cfg)
        self.dropout = Dropout(cfg.dropout)
        self.pre = cfg.norm_position == "pre"

    def forward(self, x: Tensor, cache: LayerCache, memory_mask: Tensor, self_mask: Tensor | None,
                is_causal: bool, p: int, group: int) -> Tensor:
        """x (N, T, D) after the ``p`` cached positions -> (N, T, D); writes the T new self-attention
        keys/values into ``cache`` at positions p..p+T-1 (the buffers have room)."""

        def self_attention(h: Tensor) -> Tensor:
            q, k, v = self.self_attn.project_qkv(h)  # (N, H, T, K), (N, H, T, K), (N, H, T, V)
            end = p + k.size(2)
            cache.self_k[:, p:end] = k.transpose(1, 2)  # (N, T, H, K): the projection's own layout
            cache.self_v[:, p:end] = v.transpose(1, 2)
            if p == 0:  # nothing cached before (training, first step): the new keys are all the keys
                return self.self_attn.attend_heads(q, k, v, mask=self_mask, is_causal=is_causal)
            return self.self_attn.attend_heads(q, cache.self_k[:, :end].transpose(1, 2),
                                               cache.self_v[:, :end].transpose(1, 2),
                                               mask=self_mask, is_causal=is_causal)  # keys (N, H, P+T, K), strided

        def encoder_attention(h: Tensor) -> Tensor:
            n, t, d = h.shape
            # the group of rows sharing a memory row attend to its keys together: (M, group*T, D)
            out = self.encoder_attn.attend(h.reshape(n // group, group * t, d), cache.cross_k, cache.cross_v,
                                           mask=memory_mask)  # (M, group*T, D)
            return out.view(n, t, d)  # (N, T, D)

        x = sublayer_connection(x, self_attention, self.self_attn_layer_norm, self.dropout, self.pre)
        x = sublayer_connection(x, encoder_attention, self.encoder_attn_layer_norm, self.dropout, self.pre)
        return sublayer_connection(x, self.feed_forward, self.final_layer_norm, self.dropout, self.pre)


class PositionalEncoding(nn.Module):
    """Section 3.5: the sinusoidal table (a buffer, not a parameter) or, as the paper's Table 3
    row (E), a learned table (``weight``, fairseq's ``embed_positions.weight``)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.max_positions = cfg.max_positions
        if cfg.positional == "learned":
            self.weight = nn.Parameter(torch.empty(cfg.max_positions, cfg.d_model))
            nn.init.normal_(self.weight, mean=0.0, std=cfg.d_model ** -0.5)
        else:
            self.register_buffer("weight", sinusoidal_table(cfg.max_positions, cfg.d_model),
                                 persistent=False)  # (max_positions, D)

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
        self.embed_tokens = embed_tokens
        self.embed_positions = PositionalEncoding(cfg)
        self.scale = math.sqrt(cfg.d_model)
        self.dropout = Dropout(cfg.dropout)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """tokens (B, T) at positions start..start+T-1 -> (B, T, D)."""
        positions = self.embed_positions(start, tokens.size(1))  # (T, D)
        return self.dropout(self.embed_tokens(tokens) * self.scale + positions)  # (B, T, D)


class Encoder(nn.Module):
    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.embed_tokens = embed_tokens  # the (maybe shared) table: parameter name encoder.embed_tokens
        self.embed = Embedding(cfg, embed_tokens)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.window = cfg.attention_window
        # pre-norm stacks need a final LayerNorm; post-norm (the paper) ends normalised already
        self.layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_position == "pre" else None

    def forward(self, src_tokens: Tensor, padding_mask: Tensor) -> Tensor:
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
    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Embedding):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = embed_tokens
        self.embed = Embedding(cfg, embed_tokens)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.layer_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_position == "pre" else None
        if cfg.tie_output:
            self.output_projection = None  # logits = x @ embed_tokens.weight^T (section 3.4)
        else:
            self.output_projection = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)

    def empty_cache(self, memory: EncoderOut, capacity: int = 16) -> DecoderCache:
        """Cross-attention keys/values computed once per memory row; empty self-attention buffers
        of ``capacity`` positions for the M * memory.group decoder rows."""
        n = memory.out.size(0) * memory.group
        layers = []
        for layer in self.layers:
            cross_k, cross_v = layer.encoder_attn.project_kv(memory.out)  # (M, H, S, K/V), once
            self_k = cross_k.new_empty(n, capacity, self.cfg.n_heads, self.cfg.d_k)  # (N, C, H, K)
            self_v = cross_v.new_empty(n, capacity, self.cfg.n_heads, self.cfg.d_v)
            layers.append(LayerCache(self_k, self_v, cross_k, cross_v))
        return DecoderCache(layers, 0, memory.group, ~memory.padding_mask[:, None, None, :], [0])

    def forward(self, tokens: Tensor, memory: EncoderOut, cache: DecoderCache,
                select: Tensor | None = None, projection: nn.Module | None = None) -> tuple[Tensor, DecoderCache]:
        """tokens (N, T) following the P cached positions -> logits (N, T, W), updated cache.
        The memory is read through ``cache`` (made from it by ``empty_cache``). With ``select``
        (bool (N, T)) only the selected positions are projected: logits (K, W), K = select.sum(),
        in row-major order (training skips the padding this way). ``projection``: an output layer
        used instead of the model's, (..., D) -> (..., W') (a vocabulary shortlist's rows,
        nmt.infer.shortlist)."""
        p, t = cache.length, tokens.size(1)
        if tokens.size(0) != cache.memory_mask.size(0) * cache.group:
            raise ValueError(f"{tokens.size(0)} target rows for {cache.memory_mask.size(0)} memory rows "
                             f"of {cache.group} decoder rows each")
        if cache.extent[0] != p or p + t > cache.capacity:  # buffers extended by another step, or full
            cache = cache.reorder(torch.arange(tokens.size(0), device=tokens.device),
                                  capacity=max(p + t, 2 * cache.capacity))
        x = self.embed(tokens, start=p)  # (N, T, D)
        if p == 0 and t > 1:
            self_mask, is_causal = None, True  # plain causal mask (fast SDPA path)
        elif t == 1:
            self_mask, is_causal = None, False  # one new token sees every cached position
        else:  # query i (absolute position p+i) may see keys 0..p+i
            self_mask = torch.ones(t, p + t, dtype=torch.bool, device=tokens.device).tril(diagonal=p)
            is_causal = False
        if self.cfg.attention_window is not None:  # restricted: keys p+i-r .. p+i only (T, P+T)
            # The cache still holds every past key; the band mask hides all but the last r+1.
            self_mask = window_mask(t, p + t, start=p, window=self.cfg.attention_window, causal=True,
                                    device=tokens.device)
            is_causal = False
        for layer, layer_cache in zip(self.layers, cache.layers):
            x = layer(x, layer_cache, cache.memory_mask, self_mask, is_causal, p, cache.group)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        if select is not None:
            x = x[select]  # (K, D)
        if projection is not None:
            logits = projection(x)  # (N, T, W')
        elif self.output_projection is None:
            logits = F.linear(x, self.embed_tokens.weight)  # (N, T, W)
        else:  # a module call, so that a quantized copy (nmt.infer.quantize) is used as such
            logits = self.output_projection(x)  # (N, T, W)
        cache.extent[0] = p + t
        return logits, DecoderCache(cache.layers, p + t, cache.group, cache.memory_mask, cache.extent)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=PAD)
        tgt_embed = src_embed if cfg.share_embeddings else nn.Embedding(
            cfg.tgt_vocab_size, cfg.d_model, padding_idx=PAD)
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
                nn.init.normal_(module.weight, mean=0.0, std=self.cfg.d_model ** -0.5)
                if module.padding_idx is not None:
                    with torch.no_grad():
                        module.weight[module.padding_idx].zero_()
            elif isinstance(module, nn.LayerNorm):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)

    def encode(self, src_tokens: Tensor) -> EncoderOut:
        """src_tokens (B, S), padded with nmt.vocab.PAD -> EncoderOut((B, S, D), padding mask (B, S))."""
        padding_mask = src_tokens.eq(PAD)  # (B, S), True = padding
        return EncoderOut(self.encoder(src_tokens, padding_mask), padding_mask)

    def decode_step(self, tgt_tokens: Tensor, memory: EncoderOut, cache: DecoderCache | None = None,
                    projection: nn.Module | None = None) -> tuple[Tensor, DecoderCache]:
        """Feed the next target tokens (B, T) (usually T=1) -> logits (B, T, W), new cache.
        With ``cache=None`` the cross-attention keys/values are computed from ``memory`` once and
        the tokens are taken to start at position 0. ``projection``: see Decoder.forward."""
        if cache is None:
            cache = self.decoder.empty_cache(memory, capacity=max(16, tgt_tokens.size(1)))
        return self.decoder(tgt_tokens, memory, cache, projection=projection)

    def forward(self, src_tokens: Tensor, tgt_in: Tensor, select: Tensor | None = None) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in = BOS + target (B, T) -> logits (B, T, W); with
        ``select`` (bool (B, T)) the logits of the selected positions only, (K, W)."""
        memory = self.encode(src_tokens)
        cache = self.decoder.empty_cache(memory, capacity=max(16, tgt_in.size(1)))
        logits, _ = self.decoder(tgt_in, memory, cache, select)
        return logits


def parameter_counts(model: Transformer) -> dict[str, int]:
    """Unique parameters per component (a tied matrix is counted once, under 'embeddings')."""
    seen: set[int] = set()

    def count(module: nn.Module | None) -> int:
        if module is None:
            return 0
        n = 0
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                n += p.numel()
        return n

    out = {"embeddings": count(model.encoder.embed_tokens) + count(model.decoder.embed_tokens)}
    out["positions (learned)"] = count(model.encoder.embed) + count(model.decoder.embed)
    out["encoder"] = count(model.encoder)
    out["decoder"] = count(model.decoder.layers) + count(model.decoder.layer_norm)
    out["output projection"] = count(model.decoder.output_projection)
    out["total"] = sum(out.values())
    return out
