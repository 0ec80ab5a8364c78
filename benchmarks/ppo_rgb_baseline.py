"""A side-by-side anchor: a plain pixel-PPO baseline in the style of ManiSkill's
`examples/baselines/ppo/ppo_rgb.py`, started from behaviour cloning on our scripted-expert demos,
in exactly our PushCube setting.

Setting (read from configs/maniskill_ppo_from_sft.yaml, i.e. env_configs/maniskill_push_cube.yaml
plus the experiment's overrides): ManiSkill3 PushCube-v1, CPU sim and software rendering, one
64x64 `base_camera` image, `pd_ee_delta_pose`, 40-step episodes, training reward
`normalized_dense`, the robot's visual meshes as our renderer draws them (`robot_visual_cell`).
The envs are our own `ManiSkillSubEnv`s (embodied_rl/envs/maniskill/sub_env.py), so the image,
the 9-D state vector (TCP pose + fingers) and the state of every reset id are the ones our policy
sees. The sub-envs are stepped in a Python loop inside this process: on a 2-core box shared with
other jobs a subprocess per env would add IPC for at most 2x parallelism, which the learner
competes for anyway.

Policy (ppo_rgb's design, written from its description): NatureCNN on the image (conv 32x8x8/4,
64x4x4/2, 64x3x3/1, FC-256 ReLU; on 64x64 inputs the maps are 15 -> 6 -> 4, so no change is
needed), Linear-256 ReLU on the state, concatenated (512); separate actor and critic heads
(Linear-512 ReLU -> out); orthogonal init; a diagonal Gaussian with a state-independent learnable
log-std initialised at -0.5; actions in the controller's normalised [-1, 1] (7-D: 6 EE deltas and
the gripper, -1 closed / +1 open), samples clipped to it for the env; evaluation uses the mean.

Phases:
1. BC: the actor mean (and the shared encoders) regressed (MSE) on the demos' (image, state) ->
   controller action pairs (`policy_actions` through the env config's action adapter, i.e. the
   `actions` the controller received), Adam 3e-4, `--bc-steps` minibatches of 64.
2. PPO: every update resets all `--num-envs` training sub-envs on fresh train-split seeds and runs
   one full 40-step episode each (terminations ignored, as ppo_rgb does without partial resets;
   the last step bootstraps from V(final obs), ppo_rgb's bootstrap_at_done=always), GAE
   (gamma 0.8, lambda 0.9: ppo_rgb's defaults), normalised advantages, clip 0.2, value coef 0.5,
   no entropy bonus, Adam 3e-4 eps 1e-5, grad norm 0.5, `--update-epochs` epochs of
   `--minibatches` minibatches, each epoch stopped once a minibatch's approx KL exceeds 0.2.

Held-out evaluation: the 64 reset ids our evaluations use (4 eval sub-envs x 16 eval epochs of
`embodied-rl eval algorithm.eval_rollout_epoch=16` and benchmarks/learning.py): drawn by our
ChunkedVectorEnv from env.eval's seeded stream over the eval split (reset_split.py); sub-env i of
eval epoch k starts from id[k][i]. Four dedicated eval sub-envs (env.eval's settings) run them,
sub-env i taking id[k][i] in epoch k, as our eval workers do. Greedy (Gaussian mean) actions,
`success_once` over the full 40 steps (terminations ignored).

Ratio printed (same run): env steps per second of the PPO rollout (policy forward included)
against the bare simulator stepping uniform random actions on the same training sub-envs, full
40-step episodes with the same resets, measured before BC and after the last update.

    python benchmarks/ppo_rgb_baseline.py --env-steps 100000 --seed 0 --out runs/ppo_rgb_s0 --eval-every 20000
    python benchmarks/ppo_rgb_baseline.py --minimal --out /tmp/ppo_rgb_min     # seconds to a minute

Demos: `--demos DIR` (written by `embodied-rl demos maniskill_sft_tiny --num-demos 100 --out DIR`),
or, if missing, recorded into OUT/demos with that command (2 demos with --minimal).
Writes OUT/results.json and prints a table.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from embodied_rl.process_env import configure_process_env

configure_process_env()  # VK_ICD_FILENAMES / MUJOCO_GL, before sapien or mani_skill are imported

import numpy as np
import torch
from torch import nn

EXPERIMENT = "maniskill_ppo_from_sft"  # whose env.train / env.eval this baseline runs in
EVAL_SUB_ENVS, EVAL_EPOCHS = 4, 16     # our benchmark's 64 held-out episodes
DEMO_CONFIG = "maniskill_sft_tiny"
# BC's length: a weak start like our SFT policy (~20-25 % greedy). Measured on the 64 held-out
# episodes (seed 0, 100 demos, minibatches of 64): 20 steps 5/64, 40 steps 2/64, 250 steps 51/64;
# 100 is a guess between them (its measurement: the first row of a run's evals).
DEFAULT_BC_STEPS = 100
AUTO_BC_STEPS = [20, 40, 60, 80, 100, 150, 200]
BC_BAND = (0.10, 0.40)


def _bc_steps(value: str):
    return value if value == "auto" else int(value)


# ---------------------------------------------------------------------------------- the network
def _init(layer: nn.Module, std: float = float(np.sqrt(2.0))) -> nn.Module:
    nn.init.orthogonal_(layer.weight, std)
    nn.init.zeros_(layer.bias)
    return layer


class Agent(nn.Module):
    """NatureCNN(image) ++ Linear-256(state) -> actor mean head, critic head; learnable log-std."""

    def __init__(self, image_hw: tuple[int, int], state_dim: int, action_dim: int) -> None:
        super().__init__()
        self.cnn = nn.Sequential(
            _init(nn.Conv2d(3, 32, 8, stride=4)), nn.ReLU(),
            _init(nn.Conv2d(32, 64, 4, stride=2)), nn.ReLU(),
            _init(nn.Conv2d(64, 64, 3, stride=1)), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            flat = self.cnn(torch.zeros(1, 3, *image_hw)).shape[1]  # 64x64 -> 64 x 4 x 4
        self.image_fc = nn.Sequential(_init(nn.Linear(flat, 256)), nn.ReLU())
        self.state_fc = nn.Sequential(_init(nn.Linear(state_dim, 256)), nn.ReLU())
        self.critic = nn.Sequential(_init(nn.Linear(512, 512)), nn.ReLU(), _init(nn.Linear(512, 1), 1.0))
        self.actor_mean = nn.Sequential(_init(nn.Linear(512, 512)), nn.ReLU(),
                                        _init(nn.Linear(512, action_dim), 0.01 * float(np.sqrt(2.0))))
        self.actor_logstd = nn.Parameter(torch.full((1, action_dim), -0.5))

    def features(self, images: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """images uint8 [B, H, W, 3], states float [B, D] -> [B, 512]."""
        x = images.permute(0, 3, 1, 2).float() / 255.0
        return torch.cat([self.image_fc(self.cnn(x)), self.state_fc(states)], dim=-1)

    def value(self, images: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        return self.critic(self.features(images, states)).squeeze(-1)

    def dist_and_value(self, images: torch.Tensor, states: torch.Tensor):
        h = self.features(images, states)
        mean = self.actor_mean(h)
        dist = torch.distributions.Normal(mean, self.actor_logstd.expand_as(mean).exp())
        return dist, self.critic(h).squeeze(-1)


# ---------------------------------------------------------------------------------- the envs
def load_setting():
    """(config, train params, eval params, instruction, the 64 held-out reset ids as [epoch][sub-env])."""
    from embodied_rl.configure import load_config
    from embodied_rl.envs.maniskill.params import ManiSkillParams
    from embodied_rl.envs.reset_split import seed_split
    from embodied_rl.envs.vector_env import ChunkedVectorEnv

    cfg = load_config(EXPERIMENT, plan=False)
    train = ManiSkillParams(**cfg.env.train.init_params) if isinstance(cfg.env.train.init_params, dict) else cfg.env.train.init_params
    ev = ManiSkillParams(**cfg.env.eval.init_params) if isinstance(cfg.env.eval.init_params, dict) else cfg.env.eval.init_params
    # the experiment's asymmetric critic reads ManiSkill's state_dict; this baseline's critic reads
    # what its actor reads, so the envs need not build it (images and the 9-D state are unchanged)
    train, ev = dataclasses.replace(train, privileged_state=False), dataclasses.replace(ev, privileged_state=False)

    class _Sized:  # a stand-in backend for reset-id arithmetic only (as tests/test_reset_split.py does)
        num_envs, action_dim = EVAL_SUB_ENVS, 7

        def num_reset_ids(self):
            return None

    assert cfg.env.eval.use_fixed_reset_state_ids and cfg.env.eval.reset_id_split == "eval"
    vec = ChunkedVectorEnv(_Sized(), cfg.env.eval, reset_id_space=seed_split(cfg.env.eval.reset_id_split))
    ids = []
    for k in range(EVAL_EPOCHS):
        vec._fixed_epoch = k  # what ChunkedVectorEnv.reset(fixed_epoch=k) sets for eval epoch k
        ids.append([vec.draw_reset_id(i, 0) for i in range(EVAL_SUB_ENVS)])
    return cfg, train, ev, cfg.env.train.task_description, ids


def make_sub_envs(params, instruction: str, n: int) -> list:
    from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv

    return [ManiSkillSubEnv(params, instruction) for _ in range(n)]


def stack(obs: list[dict]) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.from_numpy(np.stack([o["main_image"] for o in obs])),
            torch.from_numpy(np.stack([o["state"] for o in obs]).astype(np.float32)))


def bare_sim(envs: list, seeds: list[int], steps: int, rng: np.random.Generator) -> float:
    """Env steps per second of the sub-envs alone: reset, `steps` uniform random actions each."""
    t0 = time.perf_counter()
    for e, s in zip(envs, seeds):
        e.reset(s)
    for _ in range(steps):
        for e in envs:
            e.step(rng.uniform(-1, 1, e.action_dim).astype(np.float32))
    return len(envs) * steps / (time.perf_counter() - t0)


@torch.no_grad()
def evaluate(agent: Agent, envs: list, ids: list[list[int]], horizon: int) -> tuple[int, int]:
    """(successes, episodes): greedy (mean) actions, success_once over `horizon` steps."""
    successes = episodes = 0
    for epoch_ids in ids:
        obs = [e.reset(r) for e, r in zip(envs, epoch_ids)]
        done = np.zeros(len(envs), bool)
        for _ in range(horizon):
            img, st = stack(obs)
            mean = agent.actor_mean(agent.features(img, st)).clamp(-1, 1).numpy()
            steps = [e.step(a) for e, a in zip(envs, mean)]
            obs = [s[0] for s in steps]
            done |= np.array([s[3] for s in steps])
        successes += int(done.sum())
        episodes += len(envs)
    return successes, episodes


# ---------------------------------------------------------------------------------- BC
def load_bc_data(cfg, demo_dir: Path):
    """Demo (image, state, controller action) arrays, checked against the experiment's env.train."""
    from embodied_rl.demos import load_demos_for
    from embodied_rl.envs.action_adapter import ActionAdapter

    chunks = load_demos_for(cfg, demo_dir)
    policy_actions = chunks.actions[:, 0]  # the action at step t
    controller = ActionAdapter(cfg.env.train.action_adapter, policy_actions.shape[-1])(policy_actions)
    return (torch.from_numpy(chunks.main_images), torch.from_numpy(chunks.states),
            torch.from_numpy(controller), len(chunks.manifest.episodes))


def bc(agent: Agent, data, steps: int, batch: int, gen: torch.Generator) -> float:
    images, states, actions, _ = data
    opt = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    loss = torch.zeros(())
    for _ in range(steps):
        idx = torch.randint(0, len(actions), (batch,), generator=gen)
        mean = agent.actor_mean(agent.features(images[idx], states[idx]))
        loss = ((mean - actions[idx]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss)


# ---------------------------------------------------------------------------------- PPO
def ppo_update(agent, opt, b, a) -> dict:
    n = b["actions"].shape[0]
    mb = max(1, n // a.minibatches)
    gen = torch.Generator().manual_seed(a.seed * 7919 + int(b["update"]))
    stats = {"approx_kl": 0.0, "clipfrac": 0.0, "pg_loss": 0.0, "v_loss": 0.0, "minibatches": 0, "kl_stops": 0}
    for _ in range(a.update_epochs):
        perm = torch.randperm(n, generator=gen)
        for start in range(0, n - mb + 1, mb):
            i = perm[start:start + mb]
            dist, v = agent.dist_and_value(b["images"][i], b["states"][i])
            logp = dist.log_prob(b["actions"][i]).sum(-1)
            ratio = (logp - b["logp"][i]).exp()
            with torch.no_grad():
                approx_kl = float(((ratio - 1) - (logp - b["logp"][i])).mean())
            if approx_kl > a.target_kl:  # ppo_rgb: stop this epoch before stepping on it
                stats["kl_stops"] += 1
                break
            adv = b["adv"][i]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - a.clip, 1 + a.clip)).mean()
            v_loss = 0.5 * ((v - b["returns"][i]) ** 2).mean()
            loss = pg + a.vf_coef * v_loss
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), a.max_grad_norm)
            opt.step()
            stats["approx_kl"] += approx_kl
            stats["clipfrac"] += float(((ratio - 1).abs() > a.clip).float().mean())
            stats["pg_loss"] += float(pg)
            stats["v_loss"] += float(v_loss)
            stats["minibatches"] += 1
    k = max(1, stats["minibatches"])
    return {key: (v / k if key in ("approx_kl", "clipfrac", "pg_loss", "v_loss") else v) for key, v in stats.items()}


@torch.no_grad()
def rollout(agent, envs, seeds, horizon, a):
    """One full episode on every training sub-env; the batch [T*N] with GAE advantages."""
    n = len(envs)
    obs = [e.reset(s) for e, s in zip(envs, seeds)]
    imgs, sts, acts, logps, vals, rews = [], [], [], [], [], []
    successes = np.zeros(n, bool)
    for _ in range(horizon):
        img, st = stack(obs)
        dist, v = agent.dist_and_value(img, st)
        act = dist.sample()
        steps = [e.step(x) for e, x in zip(envs, act.clamp(-1, 1).numpy())]
        obs = [s[0] for s in steps]
        imgs.append(img), sts.append(st), acts.append(act), logps.append(dist.log_prob(act).sum(-1)), vals.append(v)
        rews.append(torch.tensor([s[1] for s in steps], dtype=torch.float32))
        successes |= np.array([s[3] for s in steps])
    last_v = agent.value(*stack(obs))  # the time limit: bootstrap from V(final obs)
    vals_t, rews_t = torch.stack(vals), torch.stack(rews)
    adv = torch.zeros_like(rews_t)
    gae = torch.zeros(n)
    for t in reversed(range(horizon)):
        nxt = last_v if t == horizon - 1 else vals_t[t + 1]
        delta = rews_t[t] + a.gamma * nxt - vals_t[t]
        gae = delta + a.gamma * a.gae_lambda * gae
        adv[t] = gae
    flat = lambda x: torch.stack(x).flatten(0, 1) if isinstance(x, list) else x.flatten(0, 1)
    batch = {"images": flat(imgs), "states": flat(sts), "actions": flat(acts), "logp": flat(logps),
             "adv": flat(adv), "returns": flat(adv + vals_t)}
    return batch, {"train_success_once": float(successes.mean()), "mean_reward": float(rews_t.mean())}


# ---------------------------------------------------------------------------------- main
def ensure_demos(a) -> Path:
    if a.demos is not None and (Path(a.demos) / "manifest.json").is_file():
        return Path(a.demos)
    out = Path(a.demos) if a.demos is not None else Path(a.out) / "demos"
    n = 2 if a.minimal else 100
    print(f"recording {n} demos into {out}", flush=True)
    subprocess.run([str(Path(sys.executable).parent / "embodied-rl"), "demos", DEMO_CONFIG, "--num-demos", str(n),
                    "--out", str(out), "--quiet"], check=True, cwd=Path(a.out))
    return out


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env-steps", type=int, default=100_000, help="PPO training env steps (whole updates of num-envs x 40)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--demos", default=None, help="demo directory (recorded there if it holds none)")
    p.add_argument("--bc-steps", type=_bc_steps, default=None,
                   help="BC minibatches of --bc-batch (default 100); `auto`: evaluate after each of "
                   f"{AUTO_BC_STEPS} steps and stop at the first held-out success in {BC_BAND} (overshooting: the "
                   "checkpoint nearer the band's middle)")
    p.add_argument("--bc-batch", type=int, default=64)
    p.add_argument("--bc-eval-at", type=int, nargs="*", default=[], help="also evaluate during BC after these steps (calibration)")
    p.add_argument("--num-envs", type=int, default=None, help="training sub-envs (default 16)")
    p.add_argument("--eval-every", type=int, default=None, help="env steps between evaluations (default 20000)")
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--gamma", type=float, default=0.8)
    p.add_argument("--gae-lambda", type=float, default=0.9)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--target-kl", type=float, default=0.2)
    p.add_argument("--vf-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (1: on 2 shared cores, 2 threads "
                   "made a BC step 10x slower, 0.35 s against 0.035 s, by spinning against the simulator and other jobs)")
    p.add_argument("--minimal", action="store_true", help="tiny sizes: 1 training env, 10-step episodes, 2 updates, 5 BC steps, 4 eval episodes (1 eval epoch)")
    a = p.parse_args(argv)
    if a.minimal:
        a.env_steps, a.num_envs = a.env_steps if "--env-steps" in (argv or sys.argv) else 20, a.num_envs or 1
        a.bc_steps, a.eval_every = 5 if a.bc_steps is None else a.bc_steps, a.eval_every or 10
    a.bc_steps = DEFAULT_BC_STEPS if a.bc_steps is None else a.bc_steps
    a.num_envs, a.eval_every = a.num_envs or 16, a.eval_every or 20_000
    return a


def main(argv=None) -> int:
    a = parse(argv)
    warnings.filterwarnings("ignore")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(a.torch_threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng([a.seed, 0xB0B])
    cfg, train_params, eval_params, instruction, eval_ids = load_setting()
    horizon = 10 if a.minimal else cfg.env.train.max_episode_steps
    eval_horizon = 10 if a.minimal else cfg.env.eval.max_episode_steps
    if a.minimal:
        eval_ids = eval_ids[:1]
    demo_dir = ensure_demos(a)
    data = load_bc_data(cfg, demo_dir)

    from embodied_rl.envs.reset_split import seed_split

    train_space = seed_split(cfg.env.train.reset_id_split)
    seed_rng = np.random.default_rng([a.seed, 0x7EA1])
    next_seeds = lambda: [int(train_space[int(i)]) for i in seed_rng.integers(0, len(train_space), a.num_envs)]

    t0 = time.perf_counter()
    train_envs = make_sub_envs(train_params, instruction, a.num_envs)
    eval_envs = make_sub_envs(eval_params, instruction, EVAL_SUB_ENVS)
    make_s = time.perf_counter() - t0
    bare = [bare_sim(train_envs, next_seeds(), horizon, rng)]

    agent = Agent(tuple(data[0].shape[1:3]), data[1].shape[1], data[2].shape[1])
    gen = torch.Generator().manual_seed(a.seed)
    bc_curve, bc_time, done_steps, loss = [], 0.0, 0, float("nan")
    auto = a.bc_steps == "auto"
    targets = AUTO_BC_STEPS if auto else sorted({s for s in a.bc_eval_at if s < int(a.bc_steps)}) + [int(a.bc_steps)]
    chosen, previous = None, None  # auto: (steps, agent state, eval row) picked, and the checkpoint before
    for target in targets:
        t = time.perf_counter()
        loss = bc(agent, data, target - done_steps, a.bc_batch, gen) if target > done_steps else loss
        bc_time += time.perf_counter() - t
        done_steps = target
        if not auto and target == targets[-1]:
            break
        s, e = evaluate(agent, eval_envs, eval_ids, eval_horizon)
        row = {"bc_steps": target, "success_once": s / e, "successes": s, "episodes": e, "bc_loss": loss}
        bc_curve.append(row)
        print(f"BC step {target}: loss {loss:.4f}, held-out success {s}/{e}", flush=True)
        if auto:
            here = (target, {k: v.clone() for k, v in agent.state_dict().items()}, row)
            if BC_BAND[0] <= row["success_once"] <= BC_BAND[1] or target == targets[-1]:
                chosen = here
            elif row["success_once"] > BC_BAND[1]:  # overshot: the checkpoint nearer the band's middle
                mid = sum(BC_BAND) / 2
                chosen = here if previous is None or abs(row["success_once"] - mid) <= abs(previous[2]["success_once"] - mid) else previous
            if chosen is not None:
                break
            previous = here
    if auto:
        a.bc_steps = chosen[0]
        agent.load_state_dict(chosen[1])
        loss = chosen[2]["bc_loss"]
        print(f"BC: {a.bc_steps} steps chosen (held-out success {chosen[2]['successes']}/{chosen[2]['episodes']})", flush=True)
    reuse = chosen[2] if auto else None  # the chosen checkpoint's evaluation is PPO's step-0 evaluation

    results = {"args": vars(a), "demos": {"dir": str(demo_dir), "episodes": data[3], "samples": len(data[2])},
               "setting": {"experiment": EXPERIMENT, "train_init_params": repr(train_params), "eval_init_params": repr(eval_params),
                           "horizon": horizon, "eval_reset_ids": eval_ids, "eval_horizon": eval_horizon,
                           "vectorisation": "python loop over ManiSkillSubEnv in one process"},
               "make_envs_s": make_s, "bc": {"steps": a.bc_steps, "time_s": bc_time, "final_loss": loss, "curve": bc_curve},
               "evals": [], "updates": []}

    opt = torch.optim.Adam(agent.parameters(), lr=a.lr, eps=1e-5)
    ppo_t0 = time.perf_counter()
    eval_s = rollout_s = 0.0
    env_steps = 0

    def do_eval(known: dict | None = None) -> None:
        nonlocal eval_s
        t = time.perf_counter()
        s, e = (known["successes"], known["episodes"]) if known else evaluate(agent, eval_envs, eval_ids, eval_horizon)
        eval_s += time.perf_counter() - t
        row = {"env_steps": env_steps, "wall_s": time.perf_counter() - ppo_t0, "train_wall_s": time.perf_counter() - ppo_t0 - eval_s,
               "bc_s": bc_time, "success_once": s / e, "successes": s, "episodes": e}
        results["evals"].append(row)
        # so far, so that an interrupted run still holds its speeds
        results["throughput"] = {"bare_sim_env_steps_per_s": bare, "rollout_s": rollout_s, "eval_s": eval_s,
                                 "ppo_rollout_env_steps_per_s": env_steps / rollout_s if rollout_s else None}
        print(f"eval @ {env_steps:>7} env steps: greedy success {s}/{e} = {100 * s / e:.1f} %  "
              f"(PPO wall {row['wall_s']:.0f} s, of which eval {eval_s:.0f} s)", flush=True)
        (out / "results.json").write_text(json.dumps(results, indent=1))

    do_eval(reuse)
    next_eval = a.eval_every
    update = 0
    while env_steps < a.env_steps:
        t = time.perf_counter()
        batch, info = rollout(agent, train_envs, next_seeds(), horizon, a)
        rollout_s += time.perf_counter() - t
        batch["update"] = update
        env_steps += a.num_envs * horizon
        stats = ppo_update(agent, opt, batch, a)
        results["updates"].append({"update": update, "env_steps": env_steps, **info, **stats,
                                   "std": float(agent.actor_logstd.exp().mean())})
        update += 1
        if update % 10 == 0:
            print(f"update {update}: env steps {env_steps}, train success_once {info['train_success_once']:.2f}, "
                  f"reward {info['mean_reward']:.3f}, kl {stats['approx_kl']:.4f}, v_loss {stats['v_loss']:.4f}", flush=True)
        if env_steps >= next_eval or env_steps >= a.env_steps:
            do_eval()
            next_eval += a.eval_every
    total_s = time.perf_counter() - ppo_t0
    bare.append(bare_sim(train_envs, next_seeds(), horizon, rng))
    ppo_rate = env_steps / rollout_s if rollout_s else float("nan")
    bare_rate = float(np.mean(bare))
    results["throughput"] = {"ppo_rollout_env_steps_per_s": ppo_rate, "bare_sim_env_steps_per_s": bare, "ratio": ppo_rate / bare_rate,
                             "ppo_overall_env_steps_per_s": env_steps / (total_s - eval_s) if total_s > eval_s else float("nan"),
                             "rollout_s": rollout_s, "eval_s": eval_s, "ppo_total_s": total_s}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    for e in train_envs + eval_envs:
        e.close()

    print(f"\npixel-PPO baseline (ppo_rgb style), PushCube-v1 64 px, seed {a.seed}; BC {a.bc_steps} steps on "
          f"{data[3]} demos in {bc_time:.0f} s; {results['evals'][-1]['episodes']} held-out episodes per eval")
    print("| env steps | PPO wall s (incl. eval) | train wall s | greedy success |")
    print("|---|---|---|---|")
    for r in results["evals"]:
        print(f"| {r['env_steps']} | {r['wall_s']:.0f} | {r['train_wall_s']:.0f} | {100 * r['success_once']:.1f} % ({r['successes']}/{r['episodes']}) |")
    print(f"PPO rollout {ppo_rate:.1f} env steps/s vs bare simulator (random actions, {a.num_envs} envs) "
          f"{bare_rate:.1f} env steps/s: ratio {ppo_rate / bare_rate:.2f}; PPO overall (rollout + update) "
          f"{results['throughput']['ppo_overall_env_steps_per_s']:.1f} env steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
