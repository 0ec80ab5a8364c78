"""Pure functions on action logits: temperature/top-k processing, sampling, log-probs, entropy.

All take `logits` float [B, T, K] restricted to the K action bins (K = 256); tokens are
relative bin indices int64 [B, T]. Each of the T tokens is an independent categorical
(parallel decoding), so the chunk log-prob is the sum over T.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from embodied_rl.models.generators import GeneratorLike, generator_for

if TYPE_CHECKING:
    from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig

#: forward_inputs key of the bins a window is centred on: int64 [B, T], the most likely bins when
#: the tokens were drawn. Training re-scores under the same window, not one around the most
#: likely bins of the updated policy (which would put sampled tokens outside it: log-prob -inf).
WINDOW_CENTER = "bin_window_center"


def process_logits(logits: torch.Tensor, temperature: float, top_k: int, window: int = 0,
                   center: torch.Tensor | None = None) -> torch.Tensor:
    """[B, T, K] -> float32 [B, T, K]: divide by temperature; with a window, keep only the bins
    within `window` of `center` int64 [B, T] (None: each token's most likely bin); then keep the
    top_k largest of those (top_k <= 0: all). The window comes first, so that an updated policy
    whose top k lie outside the rollout's window still keeps bins inside it."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use do_sample=False for greedy), got {temperature}")
    x = logits.float() / temperature
    if window > 0:
        bins = torch.arange(x.shape[-1], device=x.device)
        mid = x.argmax(dim=-1, keepdim=True) if center is None else center.to(x.device).long().unsqueeze(-1)
        x = x.masked_fill((bins - mid).abs() > window, float("-inf"))
    if 0 < top_k < x.shape[-1]:
        # A threshold only (no gradient flows through a comparison): detached, autograd keeps
        # nothing of topk for backward.
        kth = torch.topk(x.detach(), top_k, dim=-1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return x


def sample_tokens(processed: torch.Tensor, do_sample: bool, generator: GeneratorLike = None) -> torch.Tensor:
    """[B, T, K] processed logits -> int64 [B, T]: multinomial draw, or argmax when not sampling.
    The draw uses the generator on the logits' device (models/generators.py)."""
    if not do_sample:
        return processed.argmax(dim=-1)
    probs = torch.softmax(processed, dim=-1)
    flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator_for(generator, probs.device))
    return flat.reshape(probs.shape[:-1])


def token_logprobs(processed: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log pi(token) [B, T] from processed logits [B, T, K] and tokens [B, T]."""
    return torch.log_softmax(processed, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def sample_and_score(logits: torch.Tensor, *, do_sample: bool, temperature: float, top_k: int, logprob_top_k: int | None,
                     window: int = 0, generator: GeneratorLike = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """[B, T, K] logits -> (tokens int64 [B, T], logprobs [B, T], entropy [B, T], extra inputs):
    tokens drawn with `top_k` and `window`, scored under `logprob_top_k` (None: the same policy
    they were drawn from) and the same window; the extra inputs ({WINDOW_CENTER: bins} with a
    window, else empty) join the forward inputs that re-score the tokens."""
    center = logits.argmax(dim=-1) if window > 0 else None
    processed = process_logits(logits, temperature, top_k, window, center)
    tokens = sample_tokens(processed, do_sample, generator)
    if logprob_top_k is not None and logprob_top_k != top_k:
        processed = process_logits(logits, temperature, logprob_top_k, window, center)
    extra = {WINDOW_CENTER: center} if center is not None else {}
    return tokens, token_logprobs(processed, tokens), token_entropy(processed), extra


def sample_and_score_as(cfg: OpenVLAOFTConfig, logits: torch.Tensor, *, do_sample: bool, temperature: float,
                        generator: GeneratorLike = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """sample_and_score with the policy's own settings: drawn with cfg.top_k (greedy decoding is
    the argmax either way), scored under cfg.logprobs_over, within cfg.action_bin_window."""
    return sample_and_score(logits, do_sample=do_sample, temperature=temperature, top_k=cfg.top_k or 0,
                            logprob_top_k=cfg.logprob_top_k, window=cfg.action_bin_window, generator=generator)


def token_entropy(processed: torch.Tensor) -> torch.Tensor:
    """Entropy [B, T] of each token's categorical; top-k-masked bins (p = 0) contribute 0."""
    logp = torch.log_softmax(processed, dim=-1)
    p = logp.exp()
    return -(p * logp.masked_fill(p == 0, 0.0)).sum(dim=-1)
