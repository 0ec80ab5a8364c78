"""OpenVLA-OFT as an out-of-tree vLLM pooling model: one bidirectional pass, action-slot readout.

vLLM has no sampler for parallel decoding over zeroed slots, so the model is a pooling
(encoder-only) model: the pooler returns, per request, the bin logits and hidden states at
the T readout rows, and sampling, log-probs, entropy and the value head run in our code
(sampling.py, heads.py), shared with the HF backend.

Images enter through vLLM's multimodal path as raw tensors (no HF processor, no tokenizer):
`{"image": {"pixel_values": [1, 6*N_img, S, S], "extra_tokens": [1, n_extra, H]?}}`. The
processor expands the request's single IMAGE id into N_img*P + n_extra placeholders;
`embed_multimodal` runs the vision towers and projector; `embed_input_ids` scatters them in.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import torch
from torch import nn
from transformers import BatchFeature
from vllm.config import VllmConfig
from vllm.forward_context import get_forward_context
from vllm.inputs import MultiModalInput, mm_input
from vllm.model_executor.layers.attention import EncoderOnlyAttention
from vllm.model_executor.layers.pooler import DispatchPooler, Pooler
from vllm.model_executor.models.interfaces import SupportsMultiModal
from vllm.model_executor.models.interfaces_base import attn_type, default_pooling_type
from vllm.multimodal import MULTIMODAL_REGISTRY
from vllm.multimodal.inputs import (
    MultiModalFieldConfig,
    MultiModalKwargsItems,
    PlaceholderRange,
)
from vllm.multimodal.parse import DictEmbeddingItems, MultiModalDataParser
from vllm.multimodal.processing import (
    BaseDummyInputsBuilder,
    BaseMultiModalProcessor,
    BaseProcessingInfo,
    ProcessorInputs,
    TimingContext,
)

from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.heads import PrismaticProjector
from embodied_rl.models.openvla_oft.vision import FusedVisionBackbone
from embodied_rl.models.openvla_oft.vllm.layout import readout_slice
from embodied_rl.models.openvla_oft.vllm.trunk import LlamaTrunk, sdpa_packed

PIXELS, EXTRA = "pixel_values", "extra_tokens"
HOST_PREFIXES = ("value_head.",)
TASK = "token_classify"


def _fields(hf_inputs: Mapping[str, torch.Tensor]) -> Mapping[str, MultiModalFieldConfig]:
    return {k: MultiModalFieldConfig.batched("image") for k in (PIXELS, EXTRA) if k in hf_inputs}


def _num_placeholders(cfg: Any) -> int:
    return cfg.oft_num_images * cfg.oft_patches_per_image + cfg.oft_num_extra_tokens


class OFTDataParser(MultiModalDataParser):
    def _parse_image_data(self, data: Any) -> Any:
        if isinstance(data, dict):
            return DictEmbeddingItems(data, modality="image", required_fields={PIXELS}, fields_factory=_fields)
        return super()._parse_image_data(data)


class OFTProcessingInfo(BaseProcessingInfo):
    def get_data_parser(self) -> MultiModalDataParser:
        return OFTDataParser(expected_hidden_size=self._get_expected_hidden_size())

    def get_supported_mm_limits(self) -> Mapping[str, int | None]:
        return {"image": 1}  # one item carries all cameras of an observation

    def get_mm_max_tokens_per_item(self, seq_len: int, mm_counts: Mapping[str, int]) -> Mapping[str, int]:
        return {"image": _num_placeholders(self.get_hf_config())}


class OFTDummyInputs(BaseDummyInputsBuilder[OFTProcessingInfo]):
    def get_dummy_text(self, mm_counts: Mapping[str, int]) -> str:
        return ""

    def get_dummy_mm_data(self, seq_len: int, mm_counts: Mapping[str, int], mm_options: Any = None) -> dict[str, Any]:
        c = self.info.get_hf_config()
        arch = OpenVLAArchConfig.from_json_dict(c.oft_arch)
        n = mm_counts.get("image", 0)
        channels = 3 * len(arch.timm_model_ids) * c.oft_num_images
        item = {PIXELS: torch.zeros(n, channels, arch.image_size, arch.image_size)}
        if c.oft_num_extra_tokens:
            item[EXTRA] = torch.zeros(n, c.oft_num_extra_tokens, c.hidden_size)
        return {"image": item}


class OFTProcessor(BaseMultiModalProcessor[OFTProcessingInfo]):
    """Tokenizer-free: the request already holds token ids; only the IMAGE id is expanded."""

    requires_tokenizer = False

    def _get_mm_fields_config(self, hf_inputs: Any, hf_processor_mm_kwargs: Any) -> Mapping[str, MultiModalFieldConfig]:
        return _fields(hf_inputs)

    def _get_prompt_updates(self, mm_items: Any, hf_processor_mm_kwargs: Any, out_mm_kwargs: Any) -> list:
        return []

    def apply(self, inputs: ProcessorInputs, timing_ctx: TimingContext) -> MultiModalInput:
        c = self.info.get_hf_config()
        image_id, n = c.oft_image_token_id, _num_placeholders(c)
        with timing_ctx.record("apply_hf_processor"):
            passthrough = self._get_hf_mm_inputs(inputs.mm_data_items, inputs.hf_processor_mm_kwargs).passthrough_data
            data = BatchFeature({k: torch.as_tensor(v) for k, v in passthrough.items()})
        mm_kwargs = MultiModalKwargsItems.from_hf_inputs(data, _fields(data))
        n_items = int(data[PIXELS].shape[0]) if PIXELS in data else 0
        prompt = list(inputs.prompt) or [image_id] * n_items  # the profiling run sends no text
        if prompt.count(image_id) != n_items:
            raise ValueError(f"request has {prompt.count(image_id)} image placeholders but {n_items} image items")
        ids: list[int] = []
        ranges = []
        for t in prompt:
            if t == image_id:
                ranges.append(PlaceholderRange(offset=len(ids), length=n))
                ids += [image_id] * n
            else:
                ids.append(t)
        with timing_ctx.record("get_mm_hashes"):
            hashes = inputs.get_mm_hashes(self.info.model_id, self.info.ctx.get_mm_config().mm_hasher_algorithm)
        return mm_input(prompt_token_ids=ids, mm_kwargs=mm_kwargs, mm_hashes=hashes, mm_placeholders={"image": ranges})


class ActionReadoutPooler(Pooler):
    """Per request: [T, n_bins + H] = bin logits (relative order) and hidden states at the readout rows."""

    def __init__(self, lm_head: nn.Linear, first_bin: int, n_bins: int, num_action_tokens: int, append_stop_token: bool) -> None:
        super().__init__()
        self.lm_head = lm_head
        self.first_bin, self.n_bins = first_bin, n_bins
        self.num_action_tokens, self.append_stop_token = num_action_tokens, append_stop_token

    def get_supported_tasks(self) -> AbstractSet[str]:
        return {TASK}

    def forward(self, hidden_states: torch.Tensor, pooling_metadata: Any) -> list[torch.Tensor]:
        cursor = pooling_metadata.get_pooling_cursor()
        firsts = cursor.first_token_indices_gpu.tolist()
        lasts = cursor.last_token_indices_gpu.tolist()
        rows = [torch.arange(f, l + 1)[readout_slice(l + 1 - f, self.num_action_tokens, self.append_stop_token)]
                for f, l in zip(firsts, lasts)]
        hidden = hidden_states[torch.cat(rows).to(hidden_states.device)]
        w = self.lm_head.weight[self.first_bin: self.first_bin + self.n_bins]
        logits = hidden @ w.t()  # only the action-bin rows of lm_head: no [T, vocab] product
        return list(torch.cat([logits, hidden], dim=-1).split(self.num_action_tokens))


class _LanguageModel(nn.Module):
    """Mirrors the checkpoint's `language_model` (a LlamaForCausalLM): `.model` trunk and `.lm_head`."""

    def __init__(self, arch: OpenVLAArchConfig) -> None:
        super().__init__()
        text = arch.llama_config()
        self.model = LlamaTrunk(text)
        self.lm_head = nn.Linear(text.hidden_size, text.vocab_size, bias=False)


@default_pooling_type(seq_pooling_type="CLS", tok_pooling_type="ALL")
@attn_type("encoder_only")
@MULTIMODAL_REGISTRY.register_processor(OFTProcessor, info=OFTProcessingInfo, dummy_inputs=OFTDummyInputs)
class OpenVLAOFTActionReadout(nn.Module, SupportsMultiModal):
    is_pooling_model = True

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        super().__init__()
        c = vllm_config.model_config.hf_config
        self.config = c
        arch = OpenVLAArchConfig.from_json_dict(c.oft_arch)
        text = arch.llama_config()
        self.vision_backbone = FusedVisionBackbone(arch, c.oft_num_images)
        self.projector = PrismaticProjector(arch.use_fused_vision_backbone, self.vision_backbone.embed_dim, text.hidden_size)
        self.language_model = _LanguageModel(arch)
        self.action_token_id = c.oft_action_token_id
        self.attention = c.oft_attention
        heads, kv_heads = text.num_attention_heads, text.num_key_value_heads
        head_size = text.hidden_size // heads
        cache = vllm_config.cache_config
        if self.attention == "vllm":
            self.attn = nn.ModuleList(
                EncoderOnlyAttention(heads, head_size, head_size ** -0.5, cache_config=cache,
                                     num_kv_heads=kv_heads, prefix=f"{prefix}attn.{i}")
                for i in range(text.num_hidden_layers))
        else:
            # Never called: it only makes the runner build attention metadata, whose
            # query_start_loc gives the packed sequences' bounds. Head size 32 because
            # the CPU metadata builder rejects unsupported sizes even for an unused layer.
            self.attn = nn.ModuleList([EncoderOnlyAttention(1, 32, 32 ** -0.5, cache_config=cache,
                                                            num_kv_heads=1, prefix=f"{prefix}attn.bounds")])
        self.pooler = DispatchPooler({TASK: ActionReadoutPooler(
            self.language_model.lm_head, arch.base_vocab_size - arch.n_action_bins, arch.n_action_bins,
            c.oft_num_action_tokens, c.oft_append_stop_token)})

    @classmethod
    def get_placeholder_str(cls, modality: str, i: int) -> str | None:
        return None

    def get_language_model(self) -> nn.Module:
        return self.language_model

    # ----------------------------------------------------------- multimodal
    def embed_multimodal(self, **kwargs: Any) -> list[torch.Tensor]:
        pixels = kwargs.get(PIXELS)
        if pixels is None:
            return []
        dtype = self.projector.fc1.weight.dtype
        pixels = torch.stack(list(pixels)) if not isinstance(pixels, torch.Tensor) else pixels
        feats = self.projector(self.vision_backbone(pixels.to(dtype)))  # [n_items, N_img*P, H]
        extra = kwargs.get(EXTRA)
        if extra is not None:
            extra = torch.stack(list(extra)) if not isinstance(extra, torch.Tensor) else extra
            feats = torch.cat([feats, extra.to(dtype)], dim=1)
        return list(feats)

    def embed_input_ids(self, input_ids: torch.Tensor, multimodal_embeddings: Any = None, *,
                        is_multimodal: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        x = self.language_model.model.embed_tokens(input_ids)
        if multimodal_embeddings is not None and len(multimodal_embeddings) > 0 and is_multimodal is not None:
            x = x.clone()
            x[is_multimodal] = torch.cat(list(multimodal_embeddings)).to(x.dtype)
        # Action slots carry zero embeddings, as in the HF path.
        return x.masked_fill((input_ids == self.action_token_id).unsqueeze(-1), 0.0)

    # --------------------------------------------------------------- forward
    def _sequence_starts(self, num_tokens: int) -> list[int]:
        md = get_forward_context().attn_metadata
        if md is None:  # profiling run without metadata: one sequence
            return [0, num_tokens]
        md = md[0] if isinstance(md, list) else md
        return md[self.attn[0].layer_name].query_start_loc.tolist()

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor, intermediate_tensors: Any = None,
                inputs_embeds: torch.Tensor | None = None, **kwargs: Any) -> torch.Tensor:
        x = inputs_embeds if inputs_embeds is not None else self.embed_input_ids(input_ids)
        if self.attention == "vllm":
            def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                n = q.shape[0]
                return self.attn[i](q.reshape(n, -1), k.reshape(n, -1), v.reshape(n, -1)).view_as(q)
        else:
            starts = self._sequence_starts(x.shape[0])

            def attend(i: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
                return sdpa_packed(q, k, v, starts)
        return self.language_model.model(x, positions, attend)

    # --------------------------------------------------------------- weights
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        """Checkpoint names (`vision_backbone.*`, `projector.*`, `language_model.*`) copied in place."""
        params = dict(self.named_parameters())
        loaded = set()
        for name, tensor in weights:
            if name.startswith(HOST_PREFIXES):
                continue  # an RLinf critic saved inside the main weights: the engine's host runs it
            if name not in params:
                raise KeyError(f"vLLM OFT model has no parameter {name!r}")
            param = params[name]
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(f"{name}: checkpoint shape {tuple(tensor.shape)} != model shape {tuple(param.shape)}")
            with torch.no_grad():
                param.copy_(tensor.to(param.dtype))
            loaded.add(name)
        return loaded
