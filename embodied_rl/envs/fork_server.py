"""What the sub-env pool's fork server imports before it forks children (envs/subproc_pool.py)."""
from __future__ import annotations

import multiprocessing as mp
import sys
from collections.abc import Sequence
from pathlib import Path

# Modules the fork server imports once, so that every forkserver child starts with them loaded
# (ManiSkill's import is ~2 s of a sub-env's ~5.6 s start). A factory names its heavy imports in a
# `preload` attribute. The first forkserver child of a process starts the server: a module asked
# for after that is imported by each child instead, as without a preload. '__main__' is multiprocessing's
# default, inert in Python 3.11 (see main_script_module, which takes its place).
_FORKSERVER_PRELOAD: list[str] = ["__main__"]
#: Always imported last: it settles the server's heap (see the module).
_SETTLE = "embodied_rl.envs.fork_server_settle"


def main_script_module() -> str | None:
    """The dotted name of this process's `__main__` script when the script is a module of a
    package on sys.path (a Ray worker runs ray/_private/workers/default_worker.py), else None.

    Every forkserver child runs the parent's main script again (as `__mp_main__`), and the server's
    own preload of '__main__' never happens: Python 3.11's forkserver passes the script's path
    under a key its server does not read. Importing the script's module in the server instead
    leaves the children only its body to run, its imports (all of Ray, ~0.4 s) already loaded."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(getattr(main, "__spec__", None), "name", None):
        return None  # run by module name (python -m), or interactive
    script = Path(path).resolve()
    for entry in sys.path:
        root = Path(entry or ".").resolve()
        if root not in script.parents:
            continue
        parts = script.relative_to(root).with_suffix("").parts
        if len(parts) > 1 and all((root.joinpath(*parts[:i]) / "__init__.py").is_file() for i in range(1, len(parts))):
            return ".".join(parts)
    return None


def preload_in_fork_server(modules: Sequence[str]) -> None:
    """Add `modules` to what the fork server imports when it starts (no effect once it runs),
    with the main script's module (see main_script_module)."""
    main = main_script_module()
    new = [m for m in ([main] if main else []) + list(modules) if m not in _FORKSERVER_PRELOAD]
    if new:
        _FORKSERVER_PRELOAD.extend(new)
        mp.get_context("forkserver").set_forkserver_preload([*_FORKSERVER_PRELOAD, _SETTLE])
