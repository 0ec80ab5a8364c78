"""Expert demonstrations for SFT: scripted experts, recording through the policy's env, storage
in ManiSkill's trajectory format with a manifest, and a validating reader (`load_demos`).

Heavy pieces (simulator, h5py) are imported by the functions that need them.
"""
from embodied_rl.demos.manifest import DemoError, DemoManifest
from embodied_rl.demos.reader import (
    DemoChunks,
    check_demos_for,
    load_demos,
    load_demos_for,
    read_manifest,
)

__all__ = ["DemoChunks", "DemoError", "DemoManifest", "check_demos_for", "load_demos", "load_demos_for", "read_manifest"]
