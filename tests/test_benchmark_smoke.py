"""Every benchmark in benchmarks/ runs end to end at a smoke size, so a change of the package
that breaks one fails here instead of on the next person who measures with it.

Each runs as a user runs it (`python benchmarks/X.py ARGS`, a subprocess) with the real
simulators, Ray, models and CLI, only at the smallest sizes that still take its whole code path,
and must exit 0 and print the ratio or result line it prints at full size. The numbers
themselves mean nothing at these sizes. A benchmark that an equivalent test elsewhere already
runs at a small size names that test (`covered_by`) instead of running twice.
`test_every_benchmark_has_a_smoke_size` fails for a new benchmark without an entry in SMOKE.

Each subprocess gets its own short TMPDIR (removed after), so what a benchmark leaves in its
temporary directories (models, runs, Ray's session) goes with it, and a benchmark's
`ray.init()` never finds another Ray session of the machine.

Most of a smoke run is process start-up (interpreters importing torch, simulators, Ray), much of
it on one core, so while a test waits for its benchmark, those of the next selected tests start
as runs end, `SLOTS` at a time; each test then checks its own run's output. Under pytest-xdist
each test runs only its own. A benchmark marked `alone` (it pins processes to cores) has the
machine to itself.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
NUM = r"(?:\d[\d.]*(?:e[+-]?\d+)?|inf)"  # a printed ratio (nan is not a result)
MANISKILL, LIBERO, VLLM = pytest.mark.maniskill, pytest.mark.libero, pytest.mark.vllm
NO_VLLM = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (the vllm extra)")
# The learning recipe's PPO step (actor_micro_batch.py's RECIPE) at its smallest: one slot (one
# worker of each kind), one sub-env per pipeline stage (each is a simulator process), one rollout
# epoch, one minibatch of the 10 chunk samples (2 sub-envs x 5 chunk steps: two micro-batches of
# the shipped 5, so the accumulation still runs), one update epoch.
SMALL_RECIPE = ("--set", "cluster.num_cpu_slots=1", "--set", "env.train.total_num_envs=2", "--set", "algorithm.rollout_epoch=1",
                "--set", "actor.global_batch_size=10", "--set", "algorithm.update_epoch=1")

# recovery.py's run (and start_up.py's groups) with one worker of each kind instead of 2 env
# workers and 2 actor ranks, and one sub-env (one simulator process to start, and to start again
# after the kill) instead of 4: a rollout batch of 2 chunk samples, one minibatch of them.
ONE_OF_EACH = ("--set", "cluster.component_placement.actor=0", "--set", "cluster.component_placement.env=0",
               "--set", "env.train.total_num_envs=1", "--set", "actor.global_batch_size=2", "--set", "actor.micro_batch_size=2")


@dataclass(frozen=True)
class Smoke:
    args: tuple[str, ...]       # "{tmp}" is the run's working directory; "{side_by_side}" the inputs written for it
    expect: str                 # a regex the output must match: the line with the benchmark's ratio or result
    marks: tuple = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout: int = 600          # seconds for the subprocess
    covered_by: str | None = None  # "tests/test_x.py::test_y" that runs this benchmark at a small size already
    alone: bool = False         # no other benchmark runs beside it


SMOKE: dict[str, Smoke] = {
    "actor_meta_init.py": Smoke(("--preset", "tiny", "--world", "1"), rf"peak RSS of the set-up, eager / meta: all ranks {NUM}x"),
    # two CLI runs (both settings) of 2 steps: the first step is not timed
    "activations.py": Smoke(("--preset", "tiny", "--batches", "1", "--image-size", "64"), rf"\| 1 \| {NUM} \| {NUM} \| {NUM} \|"),
    "actor_micro_batch.py": Smoke(("--steps", "2", *SMALL_RECIPE), rf"training time ratio .*: {NUM}x; whole step {NUM}x",
                                  (MANISKILL,), timeout=1200),
    "brdf_table.py": Smoke(("--rounds", "1"), rf"make, wall, mean: .* sapien / zero = {NUM}x", (MANISKILL,)),
    "channel.py": Smoke(("--repeats", "1", "--batch", "1"), rf"speedup shm \(zero-copy\) vs ray object store: +{NUM}x"),
    "env_server.py": Smoke(("--envs", "1", "--chunk-steps", "1", "--chunk", "2", "--rounds", "1"), rf"served / in-process: {NUM}x", (MANISKILL,)),
    "health_monitors.py": Smoke((), rf"false alarms: \d+ in \d+ steps.*\n.*overhead ratio {NUM}"),
    "heap_start.py": Smoke(("--rounds", "1"), rf"policy: .* settled / default: {NUM}x(.|\n)*sub-env: .* settled / default: {NUM}x", (MANISKILL,)),
    "kl_reference.py": Smoke(("--models", "tiny"), rf"\| tiny \| {NUM} \| frozen_adapters \| .*\| {NUM} \|"),
    "learning.py": Smoke(("--seeds", "0", "--minimal", "--algos", "ppo", "--out", "{tmp}"), r"\| PPO after \|", (MANISKILL,),
                         covered_by="tests/test_learning.py::test_minimal_recipe_runs_through_the_real_code_path"),
    "libero_render.py": Smoke(("--size", "32", "--steps", "1", "--rounds", "1"), rf"step ratio: {NUM}x", (LIBERO,)),
    "memory_forecast.py": Smoke(("--presets", "tiny", "--cases", "lora-fp32", "--ranks", "2", "--steps", "1", "--allocators", "returning"),
                                rf"\| tiny \| lora-fp32 \| 2 \| {NUM} .*\| {NUM}, \*\*{NUM}\*\* \|"),
    "optimizer_step.py": Smoke(("--rounds", "1", "--steps", "1"), rf"optimizer step, per-parameter loop / fused: {NUM}x; foreach / fused: {NUM}x"),
    "overhead.py": Smoke(("--sim", "maniskill", "--envs", "1", "--size", "32", "--steps", "8", "--rounds", "1"),
                         rf"(?m)^ +1 +{NUM} +{NUM} +{NUM}$", (MANISKILL,)),
    "overhead_rollout.py": Smoke(("--envs", "1", "--size", "32", "--chunk-steps", "1", "--rounds", "1"),
                                 rf"ratio full loop / raw simulator: +{NUM}", (MANISKILL,)),
    # --device-ms: the device cost model without its 3 calibration epochs
    "pipeline.py": Smoke(("--envs", "2", "--chunk-steps", "1", "--epochs", "1", "--cost-model", "device", "--device-ms", "1"),
                         rf"ratio 2 stages / 1 stage: {NUM}", (MANISKILL, pytest.mark.serial), alone=True),  # it pins this user's Ray processes
    "policy_forward.py": Smoke(("--image-size", "64", "--batch-sizes", "1,2", "--iters", "1"), rf"(?m)^ +2 +{NUM} +{NUM} +{NUM} +{NUM} "),
    "ppo_cartpole.py": Smoke(("--max-steps", "64", "--num-envs", "2", "--horizon", "16", "--eval-every", "1"),
                             rf"RESULT solved=\w+ .* ratio_vs_475={NUM}"),
    "ppo_rgb_baseline.py": Smoke(("--minimal", "--seed", "0", "--out", "{tmp}/out"), rf"ratio {NUM}; PPO overall", (MANISKILL,),
                                 covered_by="tests/test_ppo_rgb_baseline.py::test_minimal_baseline_runs"),
    "process_start.py": Smoke(("--rounds", "1"), rf"config check: .* with the old imports: {NUM}x"),
    "reconfigure_reset.py": Smoke(("--resets", "1", "--rounds", "1"), rf"clustered / full: {NUM}x", (MANISKILL,)),
    "real_size.py": Smoke(("--preset", "tiny", "--image-size", "28", "--out", "{tmp}/ckpt", "--stages", "create,plan,forward,backward"),
                          r"plan \(exit 0\):(.|\n)*forward \(one observation.*finite True(.|\n)*backward \(LoRA.*finite True"),
    # --kill-after 2: the least with a normal step (step 2) to compare with; 4 steps, one restart;
    # one worker of each kind and one sub-env
    "recovery.py": Smoke(("--kill-after", "2", *ONE_OF_EACH), rf"recovery / normal step: {NUM}x; restarts logged: 1", (MANISKILL,), timeout=1200),
    # --steps 0: the pictures only; its PPO phase is actor_micro_batch.py's run_recipe, smoked there
    "render_mesh.py": Smoke(("--pictures", "1", "--steps", "0"), rf"picture ratio: {NUM}x", (MANISKILL,)),
    "render_on_demand.py": Smoke(("--envs", "1", "--size", "32", "--max-steps", "8", "--chunks", "1", "--rounds", "1"),
                                 rf"lazy / eager throughput: {NUM}x", (MANISKILL,)),
    "render_threads.py": Smoke(("--envs", "1", "--size", "32", "--steps", "8", "--rounds", "1"), rf"N=1: .* ratio {NUM}", (MANISKILL,)),
    "rollout_backends.py": Smoke(("--batches", "1", "--repeats", "1"), rf'"vllm_over_hf": {NUM}', (VLLM, NO_VLLM),
                                 env={"OMP_NUM_THREADS": "1"}),
    "side_by_side.py": Smoke(("--ours", "{side_by_side}/runs/ours", "--baseline", "{side_by_side}/ppo_rgb/results.json",
                              "--out", "{tmp}/side_by_side.png"), rf"\(ratio {NUM}\)(.|\n)*plot: "),
    "start_up.py": Smoke(("--rounds", "1", *ONE_OF_EACH), rf"\| ratio {NUM} \|", (MANISKILL,), timeout=900),
    "subenv_start.py": Smoke(("--envs", "1", "--pools", "1", "--rounds", "1"), rf"all pools: baseline / preload = {NUM}x", (MANISKILL,)),
    "vllm_lora_host.py": Smoke(("--preset", "tiny", "--repeats", "1"), rf"host memory, whole policy / engine host: {NUM}x", (VLLM, NO_VLLM)),
    "weight_sync.py": Smoke(("--mb", "1", "--repeats", "1"), rf"driver route / reference route: {NUM}x"),
    "weight_sync_buckets.py": Smoke(("--preset", "tiny", "--bucket-mb", "1", "--repeats", "1"),
                                    rf"receiver peak, whole fp32 / buckets bf16: {NUM}x"),
}


def _cases() -> list:
    """The uncovered benchmarks, those that run alone first: the others then run two at a time."""
    cases = sorted((item for item in SMOKE.items() if item[1].covered_by is None), key=lambda item: not item[1].alone)
    return [pytest.param(name, smoke, id=name.removesuffix(".py"), marks=[*smoke.marks, pytest.mark.timeout(smoke.timeout + 120)])
            for name, smoke in cases]


def test_every_benchmark_has_a_smoke_size() -> None:
    """A benchmark added without a SMOKE entry (or an entry whose script is gone) fails here;
    an entry covered elsewhere names a test that exists and runs that script with its arguments."""
    assert sorted(SMOKE) == sorted(p.name for p in BENCHMARKS.glob("*.py"))
    for name, smoke in SMOKE.items():
        if smoke.covered_by:
            path, _, test = smoke.covered_by.partition("::")
            source = (REPO / path).read_text()
            assert f"def {test}(" in source and f'"{name}"' in source, (name, smoke.covered_by)
            assert all(f'"{a}"' in source for a in smoke.args if "{" not in a), (name, smoke.covered_by)


def _side_by_side_inputs(root: Path) -> Path:
    """What side_by_side.py reads, in the layout its two sources write: a training run of ours
    (config.yaml, metrics.jsonl with evaluations at steps 0 and 2) and ppo_rgb_baseline.py's
    results.json (evaluations at 0 and 320 env steps). benchmarks/ppo_rgb_baseline.py itself
    runs in tests/test_ppo_rgb_baseline.py."""
    run = root / "runs" / "ours"
    run.mkdir(parents=True)
    config = {"env": {"train": {"total_num_envs": 4, "max_episode_steps": 40}},
              "actor": {"model": {"num_action_chunks": 8}}, "algorithm": {"rollout_epoch": 1}}
    (run / "config.yaml").write_text(json.dumps(config))  # JSON is YAML
    rows = [{"step": 0, "time": 100.0, "eval/success_once": 0.25, "eval/num_trajectories": 4.0},
            {"step": 1, "time": 130.0, "train/actor/policy_loss": 0.1},
            {"step": 2, "time": 160.0, "eval/success_once": 0.5, "eval/num_trajectories": 4.0}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "ppo_rgb").mkdir()
    evals = [{"env_steps": 0, "wall_s": 1.0, "success_once": 0.25, "episodes": 4},
             {"env_steps": 320, "wall_s": 20.0, "success_once": 0.0, "episodes": 4}]
    (root / "ppo_rgb" / "results.json").write_text(json.dumps({"evals": evals}))
    return root


@dataclass
class _Run:
    """A benchmark subprocess: its output goes to files (a pipe nobody reads would block it)."""
    name: str
    args: list[str]
    proc: subprocess.Popen
    tmpdir: Path  # its TMPDIR, holding its working directory and output files
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # when running() first saw it ended

    def running(self) -> bool:
        if self.ended is None and self.proc.poll() is not None:
            self.ended = time.monotonic()
        return self.ended is None

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """(exit code, stdout, stderr); the process group is killed past `timeout` seconds."""
        late = ""
        try:
            self.proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            self.kill()
            self.proc.wait()
            late = f"\n(killed: past its timeout, {time.monotonic() - self.started:.0f} s after its start)"
        out, err = ((self.tmpdir / f).read_text(errors="replace") for f in ("stdout", "stderr"))
        err += late
        self.running()
        print(f"{self.name}: {self.ended - self.started:.1f} s from its start to its end")  # shown by -s, -rP
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: the benchmark and its children
        except ProcessLookupError:
            pass


def _start(name: str, smoke: Smoke) -> tuple[_Run, float]:
    """Start benchmark `name` at its smoke size; (the run, its deadline on the monotonic clock)."""
    # A short path: Ray's session sockets live under TMPDIR and must stay within 107 bytes.
    tmpdir = Path(tempfile.mkdtemp(prefix="bsmoke"))
    work = tmpdir / "work"
    work.mkdir()
    inputs = _side_by_side_inputs(tmpdir / "inputs") if name == "side_by_side.py" else None
    args = [a.format(tmp=work, side_by_side=inputs) for a in smoke.args]
    env = dict(os.environ, TMPDIR=str(tmpdir), PYTHONUNBUFFERED="1", WANDB_MODE="offline", **smoke.env)
    with open(tmpdir / "stdout", "w") as out, open(tmpdir / "stderr", "w") as err:
        proc = subprocess.Popen([sys.executable, str(BENCHMARKS / name), *args], cwd=work, env=env, stdout=out, stderr=err,
                                start_new_session=True)
    return _Run(name, args, proc, tmpdir), time.monotonic() + smoke.timeout


_STARTED: dict[str, tuple[_Run, float]] = {}  # benchmarks started and not yet checked by their test
SLOTS = 2  # benchmarks running at once: one per core of the 2-core CI box


@pytest.fixture(scope="module", autouse=True)
def _no_run_left_behind() -> Iterator[None]:
    """A benchmark started for a test that then did not run (a stop after a failure) is killed."""
    yield
    for run, _ in _STARTED.values():
        run.kill()
        run.finish(0)
    _STARTED.clear()


def _ahead(request: pytest.FixtureRequest) -> list[tuple[str, Smoke]]:
    """The benchmarks of the selected tests after this one, in order, up to the first that runs
    alone. Empty under pytest-xdist: its workers share the machine already, and a `serial` test of
    another worker, which starts once this test ends, must find no benchmark of this module running."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return []
    items = request.session.items
    ahead = []
    for item in items[items.index(request.node) + 1:]:
        if item.originalname != request.node.originalname or item.module is not request.node.module:
            break
        if any(m.name == "skip" or (m.name == "skipif" and m.args and m.args[0]) for m in item.iter_markers()):
            continue  # it will not run (vLLM absent)
        name, smoke = item.callspec.params["name"], item.callspec.params["smoke"]
        if smoke.alone:
            break
        ahead.append((name, smoke))
    return ahead


@pytest.mark.parametrize(("name", "smoke"), _cases())
def test_benchmark_runs_at_smoke_size(name: str, smoke: Smoke, request: pytest.FixtureRequest) -> None:
    if name not in _STARTED:
        _STARTED[name] = _start(name, smoke)
    run, deadline = _STARTED[name]
    ahead = [] if smoke.alone else [(n, s) for n, s in _ahead(request) if n not in _STARTED]
    # While it runs, the benchmarks of the next tests start as runs end: SLOTS at a time.
    while run.running() and time.monotonic() < deadline:
        if ahead and sum(r.running() for r, _ in _STARTED.values()) < SLOTS:
            following, following_smoke = ahead.pop(0)
            _STARTED[following] = _start(following, following_smoke)
        time.sleep(0.2)
    del _STARTED[name]
    returncode, stdout, stderr = run.finish(deadline - time.monotonic())
    out = stdout + stderr
    assert returncode == 0, f"{name} {' '.join(run.args)} exited {returncode}:\n{stdout[-3000:]}\n{stderr[-5000:]}"
    assert re.search(smoke.expect, stdout), f"{name}: no line matching {smoke.expect!r} in its output:\n{out[-4000:]}"
