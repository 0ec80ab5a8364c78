"""The memory plan (embodied_rl/memory): parameter counts read from checkpoint headers against the
built policy (LoRA against peft's own count), activations counted on fake tensors against the real
forward's saved tensors, the per-rank arithmetic against hand-computed cases, and a config that
cannot fit refused before anything starts."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError
from embodied_rl.memory.params import (
    ParamCounts,
    checkpoint_shapes,
    lora_parameter_count,
    numel,
)
from embodied_rl.memory.plan import (
    GIB,
    actor_terms,
    check_fits,
    cpu_heap_retention,
    memory_plan,
    rollout_terms,
)
from tests.cli_runs import run_cli, run_cli_failing

SFT = Path(__file__).resolve().parents[1] / "models" / "tiny-oft-push-cube-sft"
# The main job's model settings (value head on 36 privileged values), then one change each.
CHANGES = [{}, {"is_lora": True, "lora_rank": 4}, {"add_value_head": False}, {"value_input": "hidden", "privileged_state_dim": None},
           {"use_proprio": True, "proprio_dim": 9}, {"is_lora": True, "lora_rank": 8, "use_proprio": True, "proprio_dim": 9}]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "recipe")
def test_counts_from_the_headers_match_the_built_policy(change: dict) -> None:
    from embodied_rl.models.registry import build_policy

    cfg = dataclasses.replace(load_config("maniskill_ppo_from_sft", plan=False).actor.model, **change)
    policy = build_policy(cfg, warn_untrained_value_head=False)
    counts = cfg.parameter_counts()
    assert counts is not None
    params = list(policy.parameters())
    assert counts.total == sum(p.numel() for p in params)
    assert counts.trainable == sum(p.numel() for p in params if p.requires_grad)  # under LoRA: peft's adapters + the heads
    assert sum(counts.groups.values()) == counts.total
    # the root unit: what FSDP's root holds, outside the separately sharded blocks and heads
    in_units = {id(p) for unit in policy.fsdp_units() for p in unit.parameters()}
    root = [p for n, p in policy.named_parameters() if id(p) not in in_units and "lora_" not in n]  # adapters: not counted apart
    assert counts.root_unit == sum(p.numel() for p in root)


def test_a_missing_checkpoint_is_not_counted(tmp_path: Path) -> None:
    cfg = load_config("maniskill_ppo_tiny", [f"actor.model.model_path={tmp_path / 'not_yet'}"], plan=False)
    assert cfg.actor.model.parameter_counts() is None


def test_sharded_checkpoints_and_lora_shapes(tmp_path: Path) -> None:
    save_file({"a.layers.0.q_proj.weight": torch.zeros(6, 4), "a.layers.0.norm.weight": torch.zeros(4)}, tmp_path / "s1.safetensors")
    save_file({"a.layers.1.q_proj.weight": torch.zeros(6, 4), "b.patch.proj.weight": torch.zeros(8, 3, 2, 2)}, tmp_path / "s2.safetensors")
    weight_map = {"a.layers.0.q_proj.weight": "s1.safetensors", "a.layers.0.norm.weight": "s1.safetensors",
                  "a.layers.1.q_proj.weight": "s2.safetensors", "b.patch.proj.weight": "s2.safetensors"}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    shapes = checkpoint_shapes(tmp_path)
    assert shapes is not None and numel(shapes) == 24 + 4 + 24 + 96
    # r x (in + out) per linear, r x in x kh x kw + out x r per convolution; 'proj' is not 'q_proj'
    assert lora_parameter_count(shapes, ["q_proj"], 2) == 2 * 2 * (4 + 6)
    assert lora_parameter_count(shapes, ["proj"], 2) == 2 * 3 * 2 * 2 + 8 * 2


def test_actor_and_rollout_terms_by_hand() -> None:
    c = ParamCounts(total=1000, trainable=100, largest_unit=50, root_unit=120, groups={"core": 900, "value_head": 100})
    # fp32 masters of the trainable weights (frozen ones in bf16), gradients and 2 Adam states
    # sharded over 4 ranks; bf16 gathered: the
    # root unit (kept from forward to backward) and 2 blocks
    assert actor_terms(c, world=4, strategy="full_shard", param_dtype="bf16") == {
        "weights": (100 * 4 + 900 * 2) // 4, "gradients": 100, "optimizer": 200, "gathered": (120 + 2 * 50) * 2}
    # shard_grad_op keeps the whole model gathered from forward to backward
    assert actor_terms(c, world=2, strategy="shard_grad_op", param_dtype="fp32") == {
        "weights": 2000, "gradients": 200, "optimizer": 400, "gathered": 4000}
    # no_shard replicates; in fp32 it computes on the master weights themselves
    assert actor_terms(c, world=2, strategy="no_shard", param_dtype="fp32") == {
        "weights": 4000, "gradients": 400, "optimizer": 800, "gathered": 0}
    assert rollout_terms(c, precision="bf16", separate_reference=True) == {"policy": 2000, "kl_reference": 1800}
    # a CPU actor's heap keeps about two micro-batches' activations and the gathered parameters
    assert cpu_heap_retention({"weights": 1000, "gradients": 100, "gathered": 30, "activations": 7}) == 2 * 7 + 30


def test_the_plan_sums_each_device_and_names_the_largest_terms() -> None:
    cfg = load_config("maniskill_ppo_from_sft", ["cluster.device_memory_gb=64"])
    from embodied_rl.config.plan import plan_run
    from embodied_rl.distributed.resources import Resources

    mp = memory_plan(cfg, plan_run(cfg, Resources(num_nodes=1, slots_per_node=2, accelerator="cpu")))
    assert [(p.component, p.device) for p in mp.processes] == [("actor", "node 0"), ("actor", "node 0"), ("rollout", "node 0"),
                                                                ("rollout", "node 0")]
    assert mp.capacity == 64 * GIB and "node 0: " in mp.table()
    assert all(("cpu_heap" in p.terms) == (p.component == "actor") for p in mp.processes)
    on_gpus = memory_plan(cfg, plan_run(cfg, Resources(num_nodes=1, slots_per_node=2, accelerator="gpu")))
    assert not any("cpu_heap" in p.terms for p in on_gpus.processes)  # the CUDA allocator is not glibc's heap
    check_fits(mp)
    small = dataclasses.replace(mp, capacity=mp.per_device()["node 0"] - 1)
    with pytest.raises(ConfigError, match=r"^node 0 needs .* GiB by the memory plan \(largest: actor cpu_heap .*, actor activations .*\), more than its"):
        check_fits(small)
    # the advice names only what this config does not use yet
    assert small.advice == ("LoRA (actor.model.is_lora)", "bf16 (actor.model.precision, actor.fsdp_config.mixed_precision.param_dtype)",
                            "gradient checkpointing (actor.model.gradient_checkpointing)", "more actor ranks to shard over", "a larger device")
    tuned = load_config("maniskill_ppo_from_sft", ["cluster.device_memory_gb=64", "actor.model.is_lora=true", "actor.model.precision=bf16",
                                                   "actor.model.gradient_checkpointing=true"], plan=False)
    assert memory_plan(tuned, plan_run(tuned, Resources(num_nodes=1, slots_per_node=2, accelerator="gpu"))).advice == (
        "more actor ranks to shard over", "offload (actor.fsdp_config.cpu_offload)", "a larger device")


def test_actor_rank_0_reads_the_whole_policy_in_fp32_while_setting_up() -> None:
    """Its set-up peak (every parameter in fp32, before the frozen ones are cast and the shards
    broadcast) counts where it exceeds its steady terms; on GPU nodes it is host memory, noted."""
    from embodied_rl.config.plan import plan_run
    from embodied_rl.distributed.resources import Resources
    from embodied_rl.memory.plan import rank0_setup_bytes

    cfg = load_config("maniskill_ppo_from_sft", ["cluster.device_memory_gb=64", "actor.model.is_lora=true",
                                                 "actor.model.precision=bf16"], plan=False)
    counts = cfg.actor.model.parameter_counts()
    assert rank0_setup_bytes(counts) == 4 * counts.total
    mp = memory_plan(cfg, plan_run(cfg, Resources(1, 2, "cpu")))
    first, second = (p for p in mp.processes if p.component == "actor")
    assert (first.setup, second.setup) == (4 * counts.total, 0)
    assert first.total == max(sum(first.terms.values()), first.setup) and "set-up peak" in mp.table()
    small = dataclasses.replace(first, terms={"weights": 1})
    assert small.total == first.setup  # a LoRA rank whose steady state is below the fp32 read
    on_gpus = memory_plan(cfg, plan_run(cfg, Resources(1, 2, "gpu")))
    assert all(p.setup == 0 for p in on_gpus.processes) and any("host memory while setting up" in n for n in on_gpus.notes)


def test_a_machine_described_by_the_caller_does_not_borrow_this_machines_memory() -> None:
    """Planning for 64 CPU slots from a 2-core box: its RAM is not the planned node's."""
    from embodied_rl.config.plan import plan_run
    from embodied_rl.distributed.resources import Resources

    cfg = load_config("maniskill_ppo_from_sft", plan=False)
    mp = memory_plan(cfg, plan_run(cfg, Resources(num_nodes=1, slots_per_node=64, accelerator="cpu")))
    assert mp.capacity is None and "set cluster.device_memory_gb" in mp.capacity_source
    here = memory_plan(cfg, plan_run(cfg, Resources(1, 2, "cpu", "this machine", local=True)))
    assert here.capacity_source == "this machine's RAM" and here.capacity > 0


def test_a_config_that_cannot_fit_is_refused_before_anything_starts(tmp_path: Path) -> None:
    proc = run_cli_failing("train", "maniskill_ppo_from_sft", "cluster.device_memory_gb=0.001", cwd=tmp_path)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "node 0 needs" in lines[0] and "(cluster.device_memory_gb)" in lines[0]
    assert not (tmp_path / "runs").exists() and "ray session" not in proc.stdout + proc.stderr
    shown = run_cli("plan", "maniskill_ppo_from_sft", cwd=tmp_path)
    assert "actor 0" in shown.stdout and "rollout 0" in shown.stdout and "fits: " in shown.stdout
    refused = run_cli_failing("plan", "maniskill_ppo_from_sft", "cluster.device_memory_gb=0.001", cwd=tmp_path)
    assert refused.returncode == 2 and "actor 0" in refused.stdout  # the table, then the one-line refusal
    # a machine you are not on: 8 GPUs of 24 GiB, one actor and one rollout rank on each
    gpus = run_cli("plan", "maniskill_ppo_from_sft", "--gpus", "8", "cluster.device_memory_gb=24", cwd=tmp_path)
    assert "actor 7          GPU 7" in gpus.stdout and "GPU 7: " in gpus.stdout and "cpu_heap" not in gpus.stdout
    no_memory = run_cli_failing("plan", "maniskill_ppo_from_sft", "--gpus", "8", cwd=tmp_path)
    assert no_memory.returncode == 2 and "error: --gpus 8 plans for GPUs that are not here" in no_memory.stderr
    # a model create_preset has not made yet, and SFT demos not recorded yet: said, nothing claimed
    unknown = run_cli("plan", "maniskill_sft_tiny", cwd=tmp_path)
    assert "no checkpoint to count yet" in unknown.stdout and "not checked: nothing forecast" in unknown.stdout
    assert "note: data.train_data_paths[0]" in unknown.stderr


def _saved_bytes(policy, obs) -> int:
    """What the real training forward of `policy` saves for backward, once per storage, but for
    its own parameters and buffers."""
    inputs = policy.prepare_inputs(obs)
    with torch.no_grad():
        record = policy.predict(inputs, do_sample=False)
    sizes = {}
    weights = {p.untyped_storage().data_ptr() for p in (*policy.parameters(), *policy.buffers())}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            sizes[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        policy.evaluate_actions(inputs, record.action_record)
    return sum(sizes.values())


@pytest.mark.parametrize("change", CHANGES[:2], ids=["recipe", "lora"])
def test_activations_on_fake_tensors_are_what_the_real_forward_saves(change: dict) -> None:
    from embodied_rl.models.activations import count_activations, example_observation
    from embodied_rl.models.registry import build_policy, policy_class

    cfg = load_config("maniskill_ppo_from_sft", [f"actor.model.{k}={v}" for k, v in change.items()])
    m = cfg.actor.model
    obs = example_observation(m, cfg.env.train, 3)
    real = _saved_bytes(build_policy(m).train(), obs)
    counted = count_activations(policy_class(m.model_type).skeleton(m.model_path, m, device="cpu"), obs)
    assert counted.saved == real > 0
    # checkpointing keeps the units' inputs and recomputes one unit at a time
    assert len(counted.in_units) == len(policy_class(m.model_type).skeleton(m.model_path, m, device="cpu").fsdp_units())
    assert counted.peak(False) == real > counted.peak(True) >= max(counted.in_units)


def test_the_plan_counts_activations_per_micro_batch_in_the_compute_dtype() -> None:
    from embodied_rl.config.plan import plan_run
    from embodied_rl.distributed.resources import Resources

    def activations(*overrides: str) -> int:
        cfg = load_config("maniskill_ppo_from_sft", ["cluster.num_cpu_slots=2", *overrides])
        mp = memory_plan(cfg, plan_run(cfg, Resources(num_nodes=1, slots_per_node=2, accelerator="cpu")))
        return mp.processes[0].terms["activations"]

    two, four = activations("actor.micro_batch_size=2"), activations("actor.micro_batch_size=4")
    assert 1.9 * two < four < 2.1 * two  # per sample, but for what is saved once (none here besides the batch)
    half = activations("actor.micro_batch_size=4", "actor.fsdp_config.mixed_precision.param_dtype=bf16")
    assert 0.45 * four < half < 0.75 * four  # bf16 activations (some tensors stay fp32: softmax statistics, the loss)
    assert activations("actor.micro_batch_size=4", "actor.model.gradient_checkpointing=true") < four


def test_a_flash_attention_config_is_counted_with_the_kernels_this_machine_runs() -> None:
    """A GPU config planned where flash-attn cannot run (or at start, on the driver's CPU): the
    count uses sdpa's fused kernel, which saves what flash-attn saves."""
    cfg = load_config("maniskill_ppo_from_sft", plan=False)
    flash = dataclasses.replace(cfg.actor.model, attn_implementation="flash_attention_2")
    assert flash.activation_bytes(cfg.env.train, 2, "bf16") == cfg.actor.model.activation_bytes(cfg.env.train, 2, "bf16") > 0


def test_plan_imports_no_simulator_and_no_distributed_training_stack(tmp_path: Path) -> None:
    """`embodied-rl plan` (and the start check it shares) stays a light process: no simulator, and
    none of the FSDP/DTensor/distributed-checkpoint modules only the actor ranks need (importing
    those doubled its time; benchmarks/process_start.py measures it)."""
    import subprocess
    import sys

    code = ("import json, sys\nfrom embodied_rl.cli import main\n"
            "code = main(['plan', 'maniskill_ppo_from_sft'])\nprint(json.dumps({'code': code, 'modules': sorted(sys.modules)}))\n")
    # The first check on a machine reads the simulators' registries once into the per-user fact
    # cache (embodied_rl/fact_cache.py); the plan measured is the one after it, as every later run's.
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["code"] == 0, proc.stderr[-2000:]
    heavy = ("mani_skill", "sapien", "libero", "robosuite", "torch.distributed.tensor", "torch.distributed.checkpoint",
             "torch.distributed.fsdp", "ray")
    assert [m for m in got["modules"] if m.split(".")[0] in heavy or m.startswith(heavy)] == []
