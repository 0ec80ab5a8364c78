"""scripts/gpu_smoke.py runs its checks on the CPU (`--cpu`), importing nothing a bare GPU
machine lacks: Ray, the simulators, vLLM, flash-attn and the config loader's omegaconf are made
unimportable in the process that runs it."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ABSENT = ("ray", "mani_skill", "sapien", "gymnasium", "vllm", "flash_attn", "omegaconf", "h5py", "imageio", "psutil",
          "tensorboard", "wandb")
BARE = ("import runpy, sys\n"
        f"for m in {ABSENT!r}: sys.modules[m] = None\n"
        "sys.argv = ['gpu_smoke.py', '--cpu']\n"
        f"runpy.run_path({str(REPO / 'scripts' / 'gpu_smoke.py')!r}, run_name='__main__')\n")


def test_gpu_smoke_checks_pass_on_the_cpu_without_the_packages_a_bare_gpu_machine_lacks() -> None:
    proc = subprocess.run([sys.executable, "-c", BARE], capture_output=True, text=True, timeout=300, cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    checks = [line.split()[1] for line in lines[:-1]]
    assert checks == ["packages", "forward", "sampling", "ppo_update", "sft_step", "export", "weight_sync", "meta_init"], proc.stdout
    assert all(line.startswith("PASS ") for line in lines[:-1]), proc.stdout
    assert lines[-1] == "gpu_smoke on cpu: 8 pass, 0 fail, 0 skip"


def test_gpu_smoke_without_a_gpu_says_how_to_run_it_on_the_cpu() -> None:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_smoke.sh")], capture_output=True, text=True, timeout=120, check=False,
                          env={"PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "", "PYTHON": sys.executable})
    assert proc.returncode == 2 and proc.stderr.strip().endswith("run with --cpu to smoke the checks on the CPU"), proc.stderr
