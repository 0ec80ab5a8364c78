"""The Llama trunk on vLLM's packed token layout ([num_tokens, H], many sequences back to back).

Parameter names follow the HF checkpoint (`layers.N.self_attn.q_proj`, ...), so weights
load by name. Attention is a callable (q, k, v) -> out over all packed tokens, given by the
vLLM model: vLLM's encoder-only layer, or per-sequence SDPA; both are bidirectional.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import LlamaConfig

AttentionFn = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 and scale in the input dtype, as HF's LlamaRMSNorm does.
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(x.dtype)


def rope_cos_sin(positions: torch.Tensor, head_size: int, theta: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Default (unscaled) Llama RoPE for positions [N] -> cos, sin [N, 1, head_size], computed in fp32."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_size, 2, dtype=torch.float32, device=positions.device) / head_size))
    freqs = positions.float()[:, None] * inv_freq[None]
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, :]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class SelfAttention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.num_heads, self.num_kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_size = cfg.hidden_size // cfg.num_attention_heads
        bias = bool(getattr(cfg, "attention_bias", False))
        self.q_proj = nn.Linear(cfg.hidden_size, self.num_heads * self.head_size, bias=bias)
        self.k_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_size, bias=bias)
        self.v_proj = nn.Linear(cfg.hidden_size, self.num_kv_heads * self.head_size, bias=bias)
        self.o_proj = nn.Linear(self.num_heads * self.head_size, cfg.hidden_size, bias=bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, attend: AttentionFn) -> torch.Tensor:
        n = x.shape[0]
        q = apply_rope(self.q_proj(x).view(n, self.num_heads, self.head_size), cos, sin)
        k = apply_rope(self.k_proj(x).view(n, self.num_kv_heads, self.head_size), cos, sin)
        v = self.v_proj(x).view(n, self.num_kv_heads, self.head_size)
        return self.o_proj(attend(layer, q, k, v).reshape(n, -1))


class MLP(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        if cfg.hidden_act != "silu":
            raise ValueError(f"only silu Llama MLPs are supported, got hidden_act={cfg.hidden_act!r}")
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = SelfAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, attend: AttentionFn) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, layer, attend)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaTrunk(nn.Module):
    """`language_model.model` of the checkpoint: embeddings, layers, final norm."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        scaling = getattr(cfg, "rope_scaling", None) or {}
        if scaling.get("rope_type", scaling.get("type", "default")) != "default":
            raise ValueError(f"only unscaled RoPE is supported, got rope_scaling={scaling}")
        self.head_size = cfg.hidden_size // cfg.num_attention_heads
        self.rope_theta = float(getattr(cfg, "rope_theta", None) or (cfg.rope_parameters or {}).get("rope_theta", 10000.0))
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, attend: AttentionFn) -> torch.Tensor:
        cos, sin = rope_cos_sin(positions, self.head_size, self.rope_theta, x.dtype)
        for i, layer in enumerate(self.layers):
            x = layer(x, cos, sin, i, attend)
        return self.norm(x)


def sdpa_packed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, starts: list[int]) -> torch.Tensor:
    """Bidirectional attention within each packed sequence [starts[i], starts[i+1]); tokens past the
    last bound (batch padding) get zeros. q [N, Hq, D], k/v [N, Hkv, D] -> [N, Hq, D]."""
    groups = q.shape[1] // k.shape[1]
    out = torch.zeros_like(q)
    for s, e in itertools.pairwise(starts):
        if e <= s:
            continue
        ks, vs = k[s:e], v[s:e]
        if groups > 1:
            ks, vs = ks.repeat_interleave(groups, dim=1), vs.repeat_interleave(groups, dim=1)
        o = F.scaled_dot_product_attention(q[s:e].transpose(0, 1), ks.transpose(0, 1), vs.transpose(0, 1), is_causal=False)
        out[s:e] = o.transpose(0, 1)
    return out
