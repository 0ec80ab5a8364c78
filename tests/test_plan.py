"""Sizes derived from the machine: every shipped config fits 2, 4, 16 and 64 CPU slots and GPU
nodes, without those machines (the resources are given, as Ray would report them)."""
from __future__ import annotations

import pytest

from embodied_rl.config.loader import CONFIG_DIR, available
from embodied_rl.config.plan import chunk_steps_per_epoch, plan_run
from embodied_rl.configure import load_config
from embodied_rl.distributed.resources import Resources, from_totals
from embodied_rl.errors import ConfigError

MACHINES = [Resources(1, n, "cpu") for n in (2, 4, 16, 64)] + [Resources(1, 8, "gpu"), Resources(4, 8, "gpu")]
#: Memory of each planned machine, per CPU node or per GPU: 4 GiB a core (8 at least), an 80 GB GPU.
MEMORY_GB = {"cpu": lambda slots: max(8, 4 * slots), "gpu": lambda slots: 80}


@pytest.mark.parametrize("name", available(CONFIG_DIR))
@pytest.mark.parametrize("res", MACHINES, ids=lambda r: f"{r.num_nodes}x{r.slots_per_node}{r.accelerator}")
def test_shipped_configs_fit_every_machine(name: str, res: Resources) -> None:
    memory = f"cluster.device_memory_gb={MEMORY_GB[res.accelerator](res.slots_per_node)}"
    cfg = load_config(name, [memory], resources=res, skip=("sft_data",))  # SFT demos are recorded by the user
    stages, slots = cfg.rollout.pipeline_stage_num, res.num_slots
    # The shipped configs place every component on every slot: one process of each per slot.
    for env in (cfg.env.train, cfg.env.eval):
        assert env.total_num_envs == slots * stages * env.groups_per_stage * env.group_size
    rollout_batch = cfg.env.train.total_num_envs * chunk_steps_per_epoch(cfg, "train") * cfg.algorithm.rollout_epoch
    assert cfg.actor.global_batch_size == (rollout_batch // cfg.algorithm.n_minibatches if cfg.runner.paradigm == "rl" else 64)
    assert cfg.actor.global_batch_size % (cfg.actor.micro_batch_size * slots) == 0


def test_default_job_on_two_cores_keeps_its_shape() -> None:
    cfg = load_config("maniskill_ppo_tiny", resources=Resources(1, 2, "cpu"))
    assert (cfg.env.train.total_num_envs, cfg.env.eval.total_num_envs) == (4, 4)
    assert (cfg.actor.global_batch_size, cfg.actor.micro_batch_size) == (20, 5)


def test_the_recipe_grows_with_the_machine() -> None:
    """groups_per_stage and n_minibatches: 64 episodes per update in 4 minibatches on 2 cores,
    the same shape per slot on 16."""
    for slots, envs, batch in ((2, 16, 80), (16, 128, 640)):
        cfg = load_config("maniskill_ppo_from_sft", resources=Resources(1, slots, "cpu"))
        assert (cfg.env.train.total_num_envs, cfg.env.eval.total_num_envs, cfg.actor.global_batch_size) == (envs, 2 * slots, batch)


@pytest.mark.parametrize(("overrides", "message"), [
    (["env.train.total_num_envs=8"], r"env.train.groups_per_stage=4 gives 16 sub-envs on this machine, but env.train.total_num_envs=8"),
    (["actor.global_batch_size=40"], r"algorithm.n_minibatches=4 gives minibatches of 80 chunks, but actor.global_batch_size=40"),
    (["algorithm.n_minibatches=3"], r"algorithm.n_minibatches=3 does not divide the rollout batch of 320 chunks"),
    (["env.eval.groups_per_stage=0"], r"env.eval.groups_per_stage: must be >= 1, got 0"),
])
def test_derivation_factors_never_sit_ignored(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("maniskill_ppo_from_sft", overrides, resources=Resources(1, 2, "cpu"))


def test_a_resolved_config_loads_again() -> None:
    """A run's config.yaml holds the derived sizes beside their factors (export, replay)."""
    from embodied_rl.config.loader import to_dict
    from embodied_rl.configure import config_from_dict

    cfg = load_config("maniskill_ppo_from_sft", resources=Resources(1, 2, "cpu"))
    again = config_from_dict(to_dict(cfg), resources=Resources(1, 2, "cpu"))
    assert (again.env.train.total_num_envs, again.actor.global_batch_size) == (16, 80)


def test_explicit_sizes_are_kept_and_checked() -> None:
    res = Resources(1, 4, "cpu")
    cfg = load_config("maniskill_ppo_tiny", ["env.train.total_num_envs=16", "actor.global_batch_size=40",
                                             "actor.micro_batch_size=5"], resources=res)
    assert (cfg.env.train.total_num_envs, cfg.actor.global_batch_size, cfg.actor.micro_batch_size) == (16, 40, 5)
    with pytest.raises(ConfigError, match=r"env.train.total_num_envs=4 must be a multiple of env workers \(4"):
        load_config("maniskill_ppo_tiny", ["env.train.total_num_envs=4"], resources=res)


def test_disaggregated_placement_derives_from_the_env_processes() -> None:
    placement = 'cluster.component_placement={"env": "0-2", "rollout": "3", "actor": "3"}'
    cfg = load_config("maniskill_ppo_tiny", [placement], resources=Resources(1, 4, "cpu"))
    assert cfg.env.train.total_num_envs == 3 * 2
    assert cfg.actor.global_batch_size == 6 * 5  # 6 sub-envs x 5 chunk steps, on one actor process
    cfg = load_config("maniskill_ppo_tiny", [placement, "actor.micro_batch_size=null"], resources=Resources(1, 4, "cpu"))
    assert cfg.actor.micro_batch_size == cfg.actor.global_batch_size  # derived: no accumulation


def test_plan_counts_processes() -> None:
    cfg = load_config("maniskill_ppo_tiny", resources=Resources(1, 2, "cpu"))
    plan = plan_run(cfg, Resources(1, 2, "cpu"))
    assert (plan.env_workers, plan.rollout_workers, plan.actor_world_size) == (2, 2, 2)


# expected: (nodes, slots per node, accelerator, CPUs reserved per slot)
@pytest.mark.parametrize(("cpus", "gpus", "nodes", "slots", "expected"), [
    (2, 0, 1, None, (1, 2, "cpu", 1)),
    (2, 0, 1, 1, (1, 1, "cpu", 1)),
    (64, 0, 1, None, (1, 64, "cpu", 1)),
    (64, 0, 1, 8, (1, 8, "cpu", 1)),
    (64, 0, 2, None, (2, 32, "cpu", 1)),
    (2, 0, 1, 4, (1, 4, "cpu", 1)),
    (96, 16, 2, None, (2, 8, "gpu", 6)),
    (16, 1, 1, None, (1, 1, "gpu", 16)),
    (4, 8, 1, None, (1, 8, "gpu", 1)),
])
def test_resources_from_ray_totals(cpus: int, gpus: int, nodes: int, slots: int | None, expected: tuple) -> None:
    res = from_totals(cpus, gpus, num_nodes=nodes, num_cpu_slots=slots, source="test")
    assert (res.num_nodes, res.slots_per_node, res.accelerator, res.cpus_per_slot) == expected


def test_gpu_count_must_split_over_nodes() -> None:
    with pytest.raises(ConfigError, match="cluster.num_nodes=2: 3 GPUs"):
        from_totals(8, 3, num_nodes=2, num_cpu_slots=None, source="test")


def test_training_loop_schedule() -> None:
    from embodied_rl.config.plan import components, evaluates_after, saves_after

    res = Resources(1, 2, "cpu")
    cfg = load_config("maniskill_ppo_tiny", ["runner.max_steps=5", "runner.val_check_interval=2", "runner.save_interval=3",
                                             "runner.val_before_train=true"], resources=res)
    assert [s for s in range(6) if evaluates_after(cfg, s)] == [0, 2, 4, 5]  # before training, every 2, the last
    assert [s for s in range(6) if saves_after(cfg, s)] == [3]  # the final save is the runner's own
    cfg = load_config("maniskill_ppo_tiny", ["runner.max_steps=5"], resources=res)
    assert not any(evaluates_after(cfg, s) or saves_after(cfg, s) for s in range(6))
    assert components(cfg) == ("env", "rollout", "actor")
    assert components(load_config("maniskill_ppo_tiny", ["runner.only_eval=true"], resources=res)) == ("env", "rollout")


GPU_NODE = Resources(1, 4, "gpu")


@pytest.mark.parametrize(("placement", "message"), [
    ("{actor: 0-3:0-7, env: all, rollout: all}",
     (r"^cluster.component_placement.actor: actor ranks 0, 1 share GPU 0, but NCCL takes one rank of a group per GPU; "
      r"place one actor process per GPU, e.g. 'actor: 0-3'$")),
    ('{"actor,env": 0-1:0-3, rollout: all}', r"actor ranks 0, 1 share GPU 0, .* e.g. 'actor: 0-1' in an entry of its own \(now 'actor,env'\)$"),
])
def test_two_actor_ranks_on_one_gpu_are_refused_before_anything_starts(placement: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config("maniskill_ppo_tiny", [f"cluster.component_placement={placement}"], resources=GPU_NODE)
    with pytest.raises(ConfigError, match=r"share GPU 4 \(node 1, local GPU 0\)"):
        load_config("maniskill_ppo_tiny", ["cluster.component_placement={actor: 4-7:0-7, env: all, rollout: all}"],
                    resources=Resources(2, 4, "gpu"))


def test_two_vllm_engines_on_one_gpu_are_refused_huggingface_rollouts_may_share() -> None:
    from embodied_rl.workers.checks import _one_process_per_gpu

    two_per_gpu = "cluster.component_placement={actor: all, env: all, rollout: 0-1:0-3}"
    cfg = load_config("maniskill_ppo_tiny", [two_per_gpu], resources=GPU_NODE)  # huggingface: one process per GPU is no need
    # The rule alone: the backend's own check (is vLLM installed?) is not what is tested here.
    cfg.rollout.backend = "vllm"
    with pytest.raises(ConfigError, match=r"^cluster.component_placement.rollout: rollout ranks 0, 1 share GPU 0, but a vLLM engine"):
        _one_process_per_gpu(cfg, plan_run(cfg, GPU_NODE))
    # Without GPUs, ranks are gloo processes and share CPU slots freely; collocated groups share a GPU.
    load_config("maniskill_ppo_tiny", ["cluster.component_placement={actor: 0-1:0-3, env: all, rollout: all}"], resources=Resources(1, 2, "cpu"))
    load_config("maniskill_ppo_tiny", resources=GPU_NODE)


@pytest.fixture
def demo_only_update():
    """An update registered as a plug-in would register it: SFT's data under another name."""
    from embodied_rl.config.paradigms import PARADIGMS
    from embodied_rl.workers.actor.updates import UPDATES, register_update
    from embodied_rl.workers.actor.updates.sft import SFTUpdate

    register_update("demo_only")(type("DemoOnly", (SFTUpdate,), {}))
    yield "demo_only"
    del UPDATES._items["demo_only"], PARADIGMS._items["demo_only"]


def test_the_plan_asks_the_update_what_it_trains_on_not_its_name(demo_only_update: str) -> None:
    """A plug-in update that learns from demos is planned like SFT (no env.train, no derived
    batch), and the demo and critic keys are checked against what it trains, naming it."""
    from embodied_rl.config.plan import training_rl, used_modes

    cfg = load_config("maniskill_sft_tiny", [f"runner.paradigm={demo_only_update}"], skip=("sft_data",))
    assert used_modes(cfg) == ("eval",) and not training_rl(cfg)
    with pytest.raises(ConfigError, match=f"runner.paradigm={demo_only_update} learns from the demos alone; set bc_coef: 0"):
        load_config("maniskill_sft_tiny", [f"runner.paradigm={demo_only_update}", "algorithm.bc_coef=0.1"])
    with pytest.raises(ConfigError, match="warms up a critic"):
        load_config("maniskill_sft_tiny", [f"runner.paradigm={demo_only_update}", "runner.critic_warmup=1"], skip=("sft_data",))
    rl = load_config("maniskill_ppo_tiny")
    assert used_modes(rl) == ("train", "eval") and training_rl(rl)
