"""Schema walk: every config key, changed on its own, is either rejected or changes what runs.

Part of the default suite (marked slow). The probes are in schema_walk_learning_probes.py and
schema_walk_runtime_probes.py, the walk base and its contexts in schema_walk_contexts.py.
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
    BASE,
    BASE_OVERRIDES,
    LOAD_SECONDS,
    MODES,
    SIM_BASE,
    Changes,
    env_type_in,
    load_in,
    present,
)
from tests.schema_walk_learning_probes import probe_plan
from tests.schema_walk_probes import (
    Leaf,
    Outcome,
    candidates,
    get_path,
    is_switch,
    override,
    quiet,
    relatedness,
    run_probe,
    schema_leaves,
    shares_name,
)
from tests.schema_walk_runtime_probes import (
    EXPERT,
    PROBES,
    end_ray_unless_base,
    expert_episodes_of,
    holds_session,
    route,
    section_of,
    shutdown_ray,
)
from tests.shared_simulators import cached_simulators

pytestmark = [pytest.mark.slow, pytest.mark.maniskill, pytest.mark.libero]

# A probe runs on the walk base and on at most this many further contexts (cost-bounded; the
# world's and the other experiments' contexts come first, then switches); cheap probes try up
# to MAX_TRIES accepted values per context, the others one. For the cheap probes the other
# experiments come on top of the budget, so a new shipped config never pushes a key's gating
# switch past it.
MAX_CONTEXTS = {"algorithm": 16, "health": 16, "plan": 12, "rundir": 12, "subproc": 6, "model": 6, "env": 2, "episode": 0,
                "actor": 1, "ray": 0, "names": 0}
# The tiny model's FSDP step takes about a second: it gets several values too (lr_warmup_steps=1
# trains exactly like 0; 2 does not).
CHEAP = ("algorithm", "health", "plan", "rundir", "subproc", "actor")
MAX_TRIES = 3
# Probes of one env mode (their outcome on a context depends on the key's mode).
MODE_PROBES = ("env", "episode", "subproc")
# Probes on a Ray session; it is kept between consecutive ones (see ray_cluster).
RAY_PROBES = ("ray", "names")



# ============================================================================ the walk

# The other experiment configs are contexts too (e.g. GRPO settings span several sections).
OTHER_EXPERIMENTS = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "configs").glob("*.yaml") if p.stem != BASE)
# Switches named like a key (is_lora for lora_rank) tried before the other experiments.
MAX_NAMED_SWITCHES = 2
# Contexts of the world rather than of a key, for keys routed to a probe: a first run, before the
# model exists (set by the test, under the walk directory).
WORLD_CONTEXTS: dict[str, list[tuple[str, ...]]] = {}

@dataclasses.dataclass
class Verdict:
    path: str
    live: bool
    evidence: str


class Walker:
    def __init__(self, leaves: list[Leaf]) -> None:
        self.leaves = leaves
        self._base_outcomes: dict[tuple[str, str, str], Outcome] = {}
        self.timings: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.key_calls: dict[str, int] = {}  # the current key's probe calls, for its verdict line

    def _probe(self, name: str, cfg: RootConfig, path: str) -> Outcome:
        t0 = time.perf_counter()
        # A running Ray session is what detect_resources reads; one started with this config's own
        # cluster settings reads as none would (the same slots), so it stays for the next Ray probe.
        if name not in RAY_PROBES and not holds_session(cfg.cluster):
            shutdown_ray()
        out = run_probe(PROBES[name], cfg, path)
        self.timings[name] = self.timings.get(name, 0.0) + time.perf_counter() - t0
        self.calls[name] = self.calls.get(name, 0) + 1
        self.key_calls[name] = self.key_calls.get(name, 0) + 1
        return out

    def _base(self, ctx: tuple[str, ...], name: str, cfg: RootConfig, path: str, walk_base: bool) -> Outcome:
        mode_key = path.split(".")[1] if name in MODE_PROBES and path.startswith("env.") else ""
        key = (repr(ctx), name, mode_key)
        if key not in self._base_outcomes:
            first = self._probe(name, cfg, path)
            if name not in ("ray", "actor", "names"):  # the cheap probes are checked for determinism
                again = self._probe(name, cfg, path)
                assert first == again, f"probe {name} is not deterministic on {ctx}: {first.summary} vs {again.summary}"
            # A consumer that fails on the walk base observes nothing: that is a broken probe.
            assert not walk_base or not first.error, f"probe {name} fails on the walk base {ctx}: {first.summary}"
            self._base_outcomes[key] = first
        return self._base_outcomes[key]

    @staticmethod
    def sim_of(leaf: Leaf) -> str | None:
        """The simulator a key is walked in: its own for init_params keys, else the base's."""
        if leaf.sim is not None:
            return leaf.sim
        parts = leaf.path.split(".")
        mode = parts[1] if parts[0] == "env" and len(parts) > 2 and parts[1] in MODES else "train"
        return env_type_in((), mode)

    def base_context(self, leaf: Leaf) -> tuple[str, ...]:
        """The walk base, or for another simulator's init_params key, an experiment running it."""
        if self.sim_of(leaf) == Walker.sim_of(dataclasses.replace(leaf, sim=None)):
            return ()
        return (f"@{SIM_BASE[leaf.sim]}",)

    def contexts(self, leaf: Leaf) -> list[tuple[tuple[str, ...], str | None, int]]:
        """(overrides, switch key) to try: the walk base, the world's contexts, the switches of
        the key's section named like it (lora_rank: is_lora), the other experiments (in the key's
        simulator), then the other switches of its section, most related first. Named switches
        go before the experiments so adding a config never pushes them past the budget.
        Each context comes with its place in the budget of the cheap probes, where the other
        experiments are free (the expensive probes count every context)."""
        base_ctx = self.base_context(leaf)
        base_cfg = load_in(base_ctx)
        assert not isinstance(base_cfg, Outcome), f"the walk base of {leaf.path} does not load: {base_cfg.summary}"
        out: list[tuple[tuple[str, ...], str | None]] = [(base_ctx, None)]
        out += [(base_ctx + w, w[0].split("=")[0]) for p in route(leaf.path) for w in WORLD_CONTEXTS.get(p, [])]
        section, sim = section_of(leaf.path), self.sim_of(leaf)
        mode = section.split(".")[1] if section.startswith("env.") else "train"
        scored = []
        for sw in self.leaves:
            if sw.path == leaf.path or section_of(sw.path) != section or sw.sim not in (None, sim):
                continue
            for value in candidates(sw, get_path(base_cfg, sw.path)):
                score = relatedness(leaf, sw, value) + is_switch(sw)
                scored.append((-score, sw.path, value, is_switch(sw) and shares_name(leaf, sw)))
        scored.sort(key=lambda s: (s[0], s[1]))
        switches = [((*base_ctx, override(path, value, present(base_ctx, path))), path) for _, path, value, _ in scored]
        named = [ctx for ctx, (*_, is_named) in zip(switches, scored) if is_named][:MAX_NAMED_SWITCHES]
        out += named
        experiments = []
        for name in [BASE, *OTHER_EXPERIMENTS]:
            ctx = () if name == BASE else (f"@{name}",)
            if ctx != base_ctx and (not section.startswith("env.") or env_type_in(ctx, mode) == sim):
                experiments.append((ctx, None))
        out += experiments
        out += [ctx for ctx in switches if ctx not in named]
        places, paid = [], 0
        for ctx in out:
            places.append(paid)
            paid += ctx not in experiments
        budget = max(MAX_CONTEXTS[p] + (len(experiments) if p in CHEAP else 0) for p in route(leaf.path))
        return [(ctx, switch, place) for (ctx, switch), place in zip(out, places)][: budget + 1]

    def judge(self, leaf: Leaf) -> Verdict:
        end_ray_unless_base()
        self.key_calls = {}
        verdict = self._judge(leaf)
        return dataclasses.replace(verdict, path=f"{leaf.path} ({leaf.sim})") if leaf.sim else verdict

    def _judge(self, leaf: Leaf) -> Verdict:
        notes: list[str] = []
        contexts = self.contexts(leaf)
        for i, (ctx, switch, place) in enumerate(contexts):
            ctx_cfg = load_in(ctx)
            if isinstance(ctx_cfg, Outcome):
                continue
            where = f" on top of {' '.join(ctx)}" if ctx else ""
            changes = Changes(ctx, leaf.path, candidates(leaf, get_path(ctx_cfg, leaf.path)), switch)
            # Probe by probe, cheapest first: an expensive consumer runs only where the cheap ones
            # saw no change on any value.
            probes = [p for p in route(leaf.path) if (place if p in CHEAP else i) <= MAX_CONTEXTS[p]]
            for name in probes:
                verdict = self._compare(leaf, name, ctx, ctx_cfg, changes, where, walk_base=i == 0)
                if verdict is None and changes.gating is None:
                    continue
                if verdict is None:  # a value refused for the setting the context turned on
                    break
                return verdict
            changes.load_all()
            if changes.gating is not None:  # the key gates the switch
                ov, why = changes.gating
                return Verdict(leaf.path, True, f"{ov}{where} rejected: {why}")
            rejected, n = changes.rejected, len(changes.overrides)
            if i == 0 and n and len(rejected) == n:
                ov, why = next(iter(rejected.items()))
                return Verdict(leaf.path, True, f"every changed value rejected{where}, e.g. {ov}: {why}")
            if i == 0:
                notes.append(f"{n} values ({len(rejected)} rejected) changed none of {probes}{where}")
        notes.append(f"nor on {len(contexts) - 1} related settings")
        return Verdict(leaf.path, False, "; ".join(notes))

    def _compare(self, leaf: Leaf, name: str, ctx: tuple[str, ...], ctx_cfg: RootConfig, changes: Changes,
                 where: str, walk_base: bool) -> Verdict | None:
        """Probe `name` on up to its number of tries of the accepted values (cheap probes
        MAX_TRIES, expensive ones one per context)."""
        tries, rejected = 0, changes.rejected
        for ov, cfg in changes.accepted():
            if changes.gating is not None:  # decided without probing
                return None
            if ov in rejected:  # refused by an earlier consumer
                continue
            if tries >= (MAX_TRIES if name in CHEAP else 1):
                break
            base = self._base(ctx, name, ctx_cfg, leaf.path, walk_base)
            if base.rejected:
                return None
            got = self._probe(name, cfg, leaf.path)
            if got.rejected:  # the consumer refused the value: try the next one
                rejected[ov] = f"{name}: {got.summary}"
                continue
            tries += 1
            if got != base:
                return Verdict(leaf.path, True, f"{ov}{where}: probe {name} changed ({base.summary[:50]} -> {got.summary[:50]})")
        return None


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
