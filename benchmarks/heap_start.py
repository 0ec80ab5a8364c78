"""The collector at start-up (embodied_rl/heap.py): CPU seconds of two start-up pieces, each in a
fresh interpreter, with the process started quiet and settled / with CPython's defaults, the two
sides alternated round by round and their medians compared in the same run.

- policy: import the tiny OpenVLA-OFT policy's modules (torch, transformers, timm) and build it,
  what a rollout or actor worker does before its first step;
- sub-env: with ManiSkill imported (the fork server's preload), build a PushCube-v1 sub-env at
  64 px, reset, 40 steps rendering every 8th, reset, close: ManiSkill collects at each scene
  rebuild and close, over everything the process holds.

    python benchmarks/heap_start.py [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_POLICY = """
import json, sys, time
from embodied_rl import heap
settled = sys.argv[1] == "settled"
t = time.process_time()
if settled:
    heap.quiet()
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.registry import build_policy
policy = build_policy(OpenVLAOFTConfig(model_path=sys.argv[2], add_value_head=True, value_type="chunk_level"))
if settled:
    heap.settle()
print(json.dumps({"cpu_s": time.process_time() - t}))
"""

_SUB_ENV = """
import json, sys, time
import numpy as np
from embodied_rl import heap
from embodied_rl.process_env import configure_process_env
configure_process_env()
import mani_skill.envs
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv
if sys.argv[1] == "settled":
    heap.settle()  # as the fork server does after its preload
t = time.process_time()
env = ManiSkillSubEnv(ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64), "push the cube")
env.reset(0)
for i in range(40):
    env.step(np.zeros(7, np.float32), render=i % 8 == 0)
env.reset(1)
env.close()
print(json.dumps({"cpu_s": time.process_time() - t}))
"""


def measure(code: str, side: str, *extra: str) -> float:
    out = subprocess.run([sys.executable, "-c", code, side, *extra], cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{side} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["cpu_s"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pieces", default="policy,sub-env", help="comma-separated: policy, sub-env")
    args = ap.parse_args()
    import tempfile

    model = str(Path(tempfile.mkdtemp(prefix="heap_start_")) / "tiny")
    if "policy" in args.pieces:
        from embodied_rl.models.create import create_model

        create_model("tiny", model, image_size=64, seed=0)
    codes = {"policy": (_POLICY, (model,)), "sub-env": (_SUB_ENV, ())}
    for piece in args.pieces.split(","):
        code, extra = codes[piece]
        measure(code, "default", *extra)  # warms the page cache
        times: dict[str, list[float]] = {"default": [], "settled": []}
        for _ in range(args.rounds):
            for side, seen in times.items():
                seen.append(measure(code, side, *extra))
        med = {side: statistics.median(v) for side, v in times.items()}
        print(f"{piece}: CPU s per process, default {med['default']:.2f} vs quiet and settled {med['settled']:.2f} "
              f"(rounds: {', '.join(f'{a:.2f}/{b:.2f}' for a, b in zip(times['default'], times['settled']))}); "
              f"settled / default: {med['settled'] / med['default']:.3f}x", flush=True)


if __name__ == "__main__":
    main()
