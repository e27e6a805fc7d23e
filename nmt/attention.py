"""Attention (section 3.2): scaled dot-product attention (eq. 1), multi-head attention, and the
restricted self-attention mask of section 4 / Table 1. Axis legend as in ``nmt.model``: B batch,
H n_heads, T queries, N keys, K d_k, V d_v, D d_model.

Speed paths beside it, switched here: ``nmt.explicit_attention`` (bf16 training on the CPU) in
``scaled_dot_product_attention``, and on CUDA the SDPA kernels it may choose (``CUDA_SDPA_BACKENDS``);
``nmt.fused_projections`` (inference) through the ``fused_qkv`` / ``fused_kv`` slots of
``MultiheadAttention``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .explicit_attention import applies as explicit_applies
from .explicit_attention import explicit_attention

# SDPA's kernels on CUDA: flash, memory-efficient, math; not cuDNN's, which builds an execution plan
# for each new shape (hundreds of ms each), and training's micro-batches and a search's shrinking
# batches bring new shapes all the time (benchmarks/gpu.py --sdpa-backends torch measures torch's own
# choice). None: torch's own choice.
CUDA_SDPA_BACKENDS: list[SDPBackend] | None = [
    SDPBackend.FLASH_ATTENTION,
    SDPBackend.EFFICIENT_ATTENTION,
    SDPBackend.MATH,
]


def window_mask(
    n_queries: int, n_keys: int, *, start: int, window: int, causal: bool, device: torch.device | None = None
) -> Tensor:
    """Restricted self-attention (section 4, Table 1): query i, at absolute position start+i, may
    attend key j iff |start + i - j| <= window (and j <= start + i when ``causal``).
    Returns (T, N) bool, True = attend (broadcasts against (B, H, T, N))."""
    q = torch.arange(start, start + n_queries, device=device)[:, None]  # (T, 1)
    k = torch.arange(n_keys, device=device)[None, :]  # (1, N)
    allowed = (q - k).abs() <= window  # (T, N)
    return allowed & (k <= q) if causal else allowed


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None, is_causal: bool, dropout_p: float
) -> Tensor:
    """Section 3.2.1, eq. 1: softmax(Q K^T / sqrt(d_k)) V per head, the scale 1/sqrt(K) (the query's
    last dimension); q (B, H, T, K), k (B, H, N, K), v (B, H, N, V); mask broadcastable to
    (B, H, T, N), True = attend, or is_causal; dropout on the weights -> (B, H, T, V). PyTorch's
    SDPA (on CUDA among ``CUDA_SDPA_BACKENDS``), or where ``nmt.explicit_attention.applies`` (bf16
    training on CPU) the explicit path."""
    if explicit_applies(q, k, mask):
        return explicit_attention(q, k, v, mask=mask, is_causal=is_causal, dropout_p=dropout_p)
    if q.is_cuda and CUDA_SDPA_BACKENDS is not None:
        with sdpa_kernel(CUDA_SDPA_BACKENDS):
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p
            )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, dropout_p=dropout_p)


class MultiheadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, scaled dot-product heads.

    Speed path: ``fused_qkv`` / ``fused_kv`` (None as built): one product over [W^Q; W^K; W^V] /
    [W^K; W^V], set by nmt.fused_projections.fuse_projections, used where it ``applies`` to x."""

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
            k, v = fused(x).split([self.n_heads * self.d_k, self.n_heads * self.d_v], -1)  # (B, N, H*K/V)
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

    def attend(
        self, query: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """query (B, T, D), k (B, H, N, K), v (B, H, N, V); mask broadcastable to (B, H, T, N),
        True where attention is allowed. Returns (B, T, D)."""
        q = self._split(self.q_proj(query), self.d_k)  # (B, H, T, K)
        return self.attend_heads(q, k, v, mask=mask, is_causal=is_causal)

    def attend_heads(
        self, q: Tensor, k: Tensor, v: Tensor, *, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """Projected queries q (B, H, T, K), k (B, H, N, K), v (B, H, N, V) -> (B, T, D)."""
        b, _, t, _ = q.shape
        out = scaled_dot_product_attention(
            q, k, v, mask=mask, is_causal=is_causal, dropout_p=self.dropout if self.training else 0.0
        )  # (B, H, T, V)
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_v)  # (B, T, H*V)
        return self.out_proj(out)  # (B, T, D)

    def forward(
        self, query: Tensor, key_value: Tensor, *, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        if query is key_value:  # self-attention
            q, k, v = self.project_qkv(query)
            return self.attend_heads(q, k, v, mask=mask, is_causal=is_causal)
        k, v = self.project_kv(key_value)
        return self.attend(query, k, v, mask=mask, is_causal=is_causal)
