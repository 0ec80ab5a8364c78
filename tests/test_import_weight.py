"""What the light processes do not import: each check runs in a fresh interpreter.

Every run starts a driver, env workers and model workers on the same cores, and importing torch
costs ~1.5 s of CPU, transformers ~2 s more (it pulls in torchvision). Validating a config
(`print-config`, the start of `train`/`eval`) needs neither transformers nor a model, and an env
worker only relays numpy arrays between its simulator processes and the channels.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SFT = REPO / "models" / "tiny-oft-push-cube-sft"


def _heavy_modules_after(code: str) -> list[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'transformers', 'timm'})))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_env_worker_imports_no_torch() -> None:
    assert _heavy_modules_after("import embodied_rl.workers.env_worker") == []


def test_validating_a_config_against_an_existing_checkpoint_imports_no_transformers() -> None:
    """The create_preset rule compares the checkpoint at model_path with the preset's shape.
    The first validation with this code fills the per-user fact cache (fact_cache.py: activation
    counts build the model, so that one imports transformers); every later one reads it. The
    test runs the validation twice so that it does not depend on an earlier test's cache."""
    code = ("from embodied_rl.configure import load_config\n"
            f"load_config('maniskill_ppo_tiny', ['actor.model.model_path={SFT}', 'actor.model.create_preset.image_size=64'])")
    _heavy_modules_after(code)
    assert "transformers" not in _heavy_modules_after(code)
