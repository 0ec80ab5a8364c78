"""The walker of tests/test_schema_walk.py: for each schema leaf, the changed values and contexts
it tries, cheapest probes first, and the verdict (live or inert, with the evidence). Not a test
module; its docstring says why and how keys are judged."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from embodied_rl.config.schema import RootConfig
from tests.schema_walk_contexts import (
    BASE,
    MODES,
    SIM_BASE,
    Changes,
    env_type_in,
    load_in,
    present,
)
from tests.schema_walk_probes import (
    Leaf,
    Outcome,
    candidates,
    get_path,
    is_switch,
    override,
    relatedness,
    run_probe,
    shares_name,
)
from tests.schema_walk_runtime_probes import (
    PROBES,
    end_ray_unless_base,
    holds_session,
    route,
    section_of,
    shutdown_ray,
)

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
