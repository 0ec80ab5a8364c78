"""The sampling generator's device follows the tensor it samples from (models/generators.py).

A vLLM engine returns its logits on the CPU while a rollout worker on a GPU node makes its
tensors on CUDA; a generator fixed to the worker's device fails the first sampled action.
Here, without CUDA: the draw picks the generator of the logits' device, a plain generator on
another device is refused in one line, and a saved state restores each device's stream on
that device only (a CUDA state is never handed to the CPU generator, nor the reverse).
"""
from __future__ import annotations

import io

import pytest
import torch

from embodied_rl.models.generators import DeviceGenerators, generator_for
from embodied_rl.models.openvla_oft import sampling as S

CUDA_STATE = torch.arange(16, dtype=torch.uint8)  # the size of a Philox (CUDA) generator state


def _draw(generator, logits: torch.Tensor | None = None) -> torch.Tensor:
    logits = torch.linspace(-2, 2, 2 * 3 * 256).reshape(2, 3, 256) if logits is None else logits
    tokens, _, _, _ = S.sample_and_score(logits, do_sample=True, temperature=1.0, top_k=0, logprob_top_k=None, generator=generator)
    return tokens


def test_cpu_logits_draw_from_the_cpu_generator_with_the_seed_of_a_plain_one():
    gens = DeviceGenerators(7)
    assert gens.get_state() == {}  # nothing made before a draw
    assert torch.equal(_draw(gens), _draw(torch.Generator().manual_seed(7)))
    assert list(gens.get_state()) == ["cpu"]
    assert gens.on("cpu") is gens.on(torch.device("cpu"))  # one generator per device


def test_a_plain_generator_on_another_device_than_the_logits_is_refused_in_one_line():
    meta_logits = torch.empty(1, 1, 256, device="meta")
    with pytest.raises(ValueError, match=r"^sampling generator is on cpu but the probabilities are on meta; pass a DeviceGenerators") as err:
        _draw(torch.Generator(), meta_logits)
    assert "\n" not in str(err.value)
    # Greedy decoding draws nothing: no generator is asked for.
    assert generator_for(None, torch.device("meta")) is None


def test_a_device_without_generators_is_named():
    with pytest.raises(ValueError, match=r"^no random generator exists on device meta"):
        DeviceGenerators(0).on("meta")


def test_state_round_trip_continues_each_stream():
    gens = DeviceGenerators(3)
    _draw(gens)
    saved = gens.get_state()
    buf = io.BytesIO()
    torch.save(saved, buf)  # as the runner checkpoints it, loaded back weights-only
    next_tokens = _draw(gens)
    restored = DeviceGenerators(3)
    restored.set_state(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert torch.equal(_draw(restored), next_tokens)
    assert torch.equal(restored.get_state()["cpu"], gens.get_state()["cpu"])


def test_a_restored_state_reaches_only_its_own_device():
    """A CPU-made checkpoint on a CUDA run, and the reverse: each state waits for its device;
    a device the checkpoint never sampled on starts from the seed."""
    gens = DeviceGenerators(3)
    gens.set_state({"cuda:0": CUDA_STATE})  # a GPU run's stream, restored where only CPU logits come
    assert torch.equal(_draw(gens), _draw(DeviceGenerators(3)))  # the CPU stream starts from the seed
    state = gens.get_state()
    assert sorted(state) == ["cpu", "cuda:0"] and torch.equal(state["cuda:0"], CUDA_STATE)  # kept for its device
    with pytest.raises(ValueError, match=r"^sampling RNG state for cuda:0 holds a CPU generator state; it restores only the device it was saved from$"):
        gens.set_state({"cuda:0": torch.Generator().get_state()})
    with pytest.raises(ValueError, match=r"^sampling RNG state for cpu holds a 16-byte accelerator generator state"):
        gens.set_state({"cpu": CUDA_STATE})


def test_set_state_forgets_streams_the_state_lacks():
    gens = DeviceGenerators(3)
    first = _draw(gens)
    gens.set_state({})
    assert torch.equal(_draw(gens), first)


@pytest.mark.parametrize(("state", "device"), [(torch.Generator().manual_seed(11).get_state(), "cpu"), (CUDA_STATE, "cuda:0")])
def test_a_single_generator_state_goes_to_the_device_it_came_from(state: torch.Tensor, device: str):
    """Checkpoints made before per-device states hold one generator's state: placed by its size."""
    gens = DeviceGenerators(3)
    gens.set_state(state)
    assert list(gens.get_state()) == [device]
    if device == "cpu":
        assert torch.equal(_draw(gens), _draw(torch.Generator().manual_seed(11)))
    with pytest.raises(ValueError, match=r"^sampling RNG state of 7 bytes is neither a CPU nor a CUDA generator state$"):
        gens.set_state(torch.zeros(7, dtype=torch.uint8))
