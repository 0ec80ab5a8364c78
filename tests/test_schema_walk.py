"""Schema walk: every config key, changed on its own, is either rejected or changes what runs.

Part of the default suite (marked slow). The probes are in schema_walk_learning_probes.py and
schema_walk_runtime_probes.py, the walk base and its contexts in schema_walk_contexts.py, the
walker in schema_walk_walker.py.
Alone: `python -m pytest tests/test_schema_walk.py -s` (prints a verdict per key and the seconds
per probe); `SCHEMA_WALK_ONLY=env.train.seed,runner` walks only the keys under those prefixes.

Why a walk and not a test per key: a test per key is only as complete as its author's list,
and a key nobody listed (or a consumer line somebody deleted) goes unnoticed. The walk derives
the key list from the schema itself (every leaf of RootConfig, and every simulator's
`init_params` dataclass), so a new key is checked the day it is added, with no exemption list.

For each leaf the walk derives changed values from its type: a bool flips, a Literal takes
each other choice and an invalid one (a str whose help documents 'a | b | c' takes each),
numbers get a tiny, a doubled, a halved, zero and a negative value, Optional goes None <->
value (a changed value first, None second), lists drop or repeat items or replace the first
(by every choice for Literal items), strings get '' and a bogus name. Each changed config is
loaded with the real `load_config` (command-line override syntax); then the key's consumers
run for real:

- `algorithm`: compute_advantages + the actor-critic loss on fixed synthetic batches;
- `actor.model`, `rollout.model`, `algorithm.sampling_params`: the tiny OFT policy built from
  the config (rollout and actor copies), predict with the runtime's sampling specs and
  evaluate_actions on fixed observations, then one backward of the actor copy (its gradients
  and the activations saved for backward); a checkpoint the config makes is observed as the
  files written;
- `actor.*` (optim, fsdp_config, batch sizes, seed): one real FSDP2 train step of ActorWorker
  (gloo, world size 1, in-process) on a batch made by the real policy and compute_advantages,
  and the sharded module's parameters after a forward;
- `env.<mode>.*` incl. init_params: make_env on the simulator (ManiSkill's CPU sim; LIBERO for
  its own init_params), worker 0 / stage 0 of the runtime's own plan (placement,
  envs_per_worker), a reset, every chunk step of one rollout epoch with fixed actions and the
  next epoch's reset; observations, rewards, flags, episodes, metrics, video files. Fixed
  actions never succeed, so the `episode` probe replays the scripted expert of
  embodied_rl/demos (recorded once, in the background, from its reset ids) through make_env:
  episodes that really terminate;
- `cluster.*`, channels, rollout workers: a real RayCluster (a Ray session per cluster
  setting, kept while consecutive probes ask for the same), its placement, the channel wiring
  of build_groups and an in-process RolloutWorker;
- `env.<mode>.subproc.*`: the real sub-env process pool with a millisecond SubEnv, through one
  shared failure context (a sub-env whose simulator raises on consecutive steps);
- `*.group_name`: the names of Ray actors started by WorkerGroup on that RayCluster;
- `runner.*`: the run directory and console output written by MetricsLogger, and the project
  and run name of its wandb run read back from the offline run file;
- plan: placement, env split, chunk steps, the env modes stepped and worker groups started,
  the steps after which the training loop evaluates and saves, needs_reference and the
  batch-fit check of runtime/groups.py. The runner loop itself is not run (see probe_plan).

Verdict per key. Live if some accepted change gives an outcome different from the unchanged
config's (a consumer error counts as an outcome), or if every changed value is rejected with a
ConfigError (a key with one valid value, e.g. a one-choice Literal). A rejection next to
accepted-but-ignored values proves nothing: a range check on an ignored key would pass.
Some keys only act when another is set (high_level_gamma needs bi_level_gae, lora_rank needs
is_lora) or on a first run (create_preset acts only where no checkpoint exists yet): when the
walk base shows nothing, the walk retries in the world's contexts (a first run: the model not
created yet), on the other experiment configs, and on top of *switch* settings of the same
section (flags, choices, optionals), most related by name first. Per context the probes run
cheapest first, each on a few values: an expensive one only where the cheap ones saw nothing.
A context setting that, combined with the key's change, is rejected naming the setting also
proves the key gates it. A key of one simulator's init_params is walked on an experiment
config running that simulator (SIM_BASE).

Why the simulators are shared: building a sub-env process costs 5-20 s (imports, software
Vulkan, LIBERO's scene), so the walk registers a caching entry for each simulator in the
backend registry. It builds the real backend on a miss, keyed by everything the backend
constructor reads (params, task_description, subproc, sub-env count, seed), and keeps the
few most recently used (each sub-env process holds up to ~1 GB); all episode semantics,
adapter and video run for real in make_env on every probe. Probes are routed by section
(not by key) to keep the walk within its time budget; a key whose consumer no probe of its
section reaches is reported, never skipped.
"""
from __future__ import annotations

import dataclasses
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from embodied_rl.config.schema import RootConfig
from tests.schema_walk_contexts import (
    BASE_OVERRIDES,
    LOAD_SECONDS,
    load_in,
)
from tests.schema_walk_learning_probes import probe_plan
from tests.schema_walk_probes import (
    Leaf,
    Outcome,
    quiet,
    schema_leaves,
)
from tests.schema_walk_runtime_probes import (
    EXPERT,
    expert_episodes_of,
    route,
    shutdown_ray,
)
from tests.schema_walk_walker import WORLD_CONTEXTS, Walker
from tests.shared_simulators import cached_simulators

pytestmark = [pytest.mark.slow, pytest.mark.maniskill, pytest.mark.libero]

# ============================================================================ fixtures and test


@pytest.fixture(scope="module")
def walk_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("schema_walk")
    cwd, threads = Path.cwd(), torch.get_num_threads()
    os.chdir(root)  # relative run dirs, videos and bogus paths land here, not in the checkout
    # The tiny model's kernels are too small to share: a second thread only spins, and on a busy
    # machine (simulator processes) it makes the in-process probes ~10x slower.
    torch.set_num_threads(1)
    yield root
    torch.set_num_threads(threads)
    os.chdir(cwd)


@pytest.fixture(scope="module")
def shared_simulators():
    """Real simulator backends cached by what their constructor reads (see the module docstring)."""
    with cached_simulators() as cache:
        yield cache
        shutdown_ray()


def walk_order(leaves: list[Leaf]) -> list[Leaf]:
    """Schema order, but the env modes' keys last (their simulator and expert are prepared in the
    background meanwhile), each env.eval key right after its env.train twin: train and eval
    share simulators (SIM_SETTINGS), so the twin's changed simulator is still cached."""
    first: dict[tuple[str, str | None], int] = {}
    for i, leaf in enumerate(leaves):
        first.setdefault((leaf.path.replace("env.eval.", "env.train.", 1), leaf.sim), i)
    def key(leaf: Leaf) -> tuple:
        twin = (leaf.path.replace("env.eval.", "env.train.", 1), leaf.sim)
        return leaf.path.startswith(("env.train.", "env.eval.")), first[twin], leaf.path.startswith("env.eval.")

    return sorted(leaves, key=key)


def test_every_key_is_live(walk_dir: Path, shared_simulators):
    from embodied_rl.envs.backend import available_simulators, get_simulator
    from embodied_rl.runtime.train import ensure_model

    BASE_OVERRIDES.append(f"actor.model.model_path={walk_dir / 'tiny-oft'}")
    WORLD_CONTEXTS["model"] = [(f"actor.model.model_path={walk_dir / 'first-run-model'}",)]
    # The rollback keys act once an action rolls back, which needs checkpoints to go back to;
    # runner.save_best once the run evaluates during training.
    WORLD_CONTEXTS["health"] = [("runner.save_interval=4", "runner.val_check_interval=5", "runner.save_best=true",
                                 "runner.health.success_drop.action=rollback", "runner.health.kl_spike.action=rollback")]
    base = load_in(())
    assert not isinstance(base, Outcome), base.summary
    base_seed = dataclasses.replace(base, runner=dataclasses.replace(base.runner, seed=base.runner.seed + 1))
    with quiet():
        ensure_model(base_seed)  # a preset made from another seed, so re-creating one is visible

    leaves = walk_order(schema_leaves(RootConfig, "", {name: get_simulator(name).params_cls for name in available_simulators()}))
    walker = Walker(leaves)
    only = tuple(os.environ.get("SCHEMA_WALK_ONLY", "").split(","))  # debugging: key prefixes to walk
    walked = [leaf for leaf in leaves if not any(only) or leaf.path.startswith(only)]
    if any("episode" in route(leaf.path) for leaf in walked):  # recorded while the walk starts
        import ray  # noqa: F401 - imported here, not half-imported by the thread while a load checks it

        probe_plan(base, "env.train")  # the same for the modules the thread imports
        EXPERT["future"] = ThreadPoolExecutor(1).submit(expert_episodes_of, base)
    verdicts = []
    t_walk = time.perf_counter()
    for leaf in walked:
        t0 = time.perf_counter()
        v = walker.judge(leaf)
        verdicts.append(v)
        calls = " ".join(f"{k} {n}" for k, n in walker.key_calls.items())
        print(f"{'live ' if v.live else 'INERT'} {v.path} ({time.perf_counter() - t0:.1f} s; {calls}): {v.evidence}", flush=True)
    print(f"{len(verdicts)} keys in {time.perf_counter() - t_walk:.0f} s; probe seconds (calls):",
          {k: f"{v:.1f} ({walker.calls[k]})" for k, v in walker.timings.items()},
          f"config loads: {sum(LOAD_SECONDS):.1f} s ({len(LOAD_SECONDS)})")
    inert = [v for v in verdicts if not v.live]
    assert not inert, f"{len(inert)} of {len(verdicts)} keys change nothing and are not rejected:\n" + "\n".join(
        f"  {v.path}: {v.evidence}" for v in inert)
