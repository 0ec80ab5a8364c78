#!/usr/bin/env bash
# Install a private software Vulkan driver (Mesa lavapipe) so SAPIEN/ManiSkill3 can render on
# the CPU (render_backend: cpu), on machines with or without a GPU Vulkan driver.
#
# Why: SAPIEN needs a Vulkan device even for state observations, and Debian bookworm's own
# lavapipe (Mesa 22.3) lacks descriptorBindingPartiallyBound, which SAPIEN requires. The
# bookworm-backports build (Mesa 25.0.x) works. We fetch it with a *private* apt state and
# sources directory (the system apt configuration is never touched), unpack it with
# `dpkg -x` into $EMBODIED_RL_HOME/vulkan and write an ICD json with the absolute library
# path. Processes then need only VK_ICD_FILENAMES=<that json> (embodied_rl/process_env.py lists
# it beside a GPU node's own drivers).
#
# Idempotent: quiet and fast when already installed. Installed beside a GPU Vulkan driver too:
# configs rendering with render_backend cpu need it there as well.
# Usage: scripts/install_vulkan.sh [--force] [--print-icd]
#   --force      reinstall even if present
#   --print-icd  print the ICD json path on stdout when done (for scripts)
# Env: EMBODIED_RL_HOME (default ~/.cache/embodied_rl), EMBODIED_RL_DEBIAN_MIRROR
#      (default http://deb.debian.org/debian).
set -euo pipefail

FORCE=0
PRINT_ICD=0
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --print-icd) PRINT_ICD=1 ;;
    *) echo "install_vulkan.sh: unknown argument '$arg' (use --force or --print-icd)" >&2; exit 2 ;;
  esac
done

HOME_DIR="${EMBODIED_RL_HOME:-$HOME/.cache/embodied_rl}"
PREFIX="$HOME_DIR/vulkan"
ICD_JSON="$PREFIX/lvp_icd.json"
MIRROR="${EMBODIED_RL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="bookworm-backports"
KEYRING="/usr/share/keyrings/debian-archive-keyring.gpg"
API_VERSION="1.4.305"

log() { echo "install_vulkan: $*" >&2; }
die() { echo "install_vulkan: error: $*" >&2; exit 1; }

done_ok() {
  if [[ $PRINT_ICD -eq 1 ]]; then echo "$ICD_JSON"; fi
  exit 0
}

# Already installed: the json exists and the library it names exists.
if [[ $FORCE -eq 0 && -f "$ICD_JSON" ]]; then
  lib=$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$ICD_JSON")
  if [[ -n "$lib" && -f "$lib" ]]; then done_ok; fi
fi

command -v apt-get >/dev/null || die "apt-get not found; this installer needs Debian 12 (bookworm). Install Mesa >= 24 lavapipe yourself and set VK_ICD_FILENAMES."
command -v dpkg >/dev/null || die "dpkg not found; this installer needs Debian 12 (bookworm)."
[[ -f "$KEYRING" ]] || die "$KEYRING missing; install the debian-archive-keyring package."

case "$(uname -m)" in
  x86_64) DEB_ARCH=amd64; TRIPLET=x86_64-linux-gnu ;;
  aarch64) DEB_ARCH=arm64; TRIPLET=aarch64-linux-gnu ;;
  *) die "unsupported CPU architecture $(uname -m) (supported: x86_64, aarch64)" ;;
esac

log "installing Mesa lavapipe from $SUITE into $PREFIX"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/sources.d" "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/prefs.d"
cat >"$WORK/sources.d/backports.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE
Components: main
Architectures: $DEB_ARCH
Signed-By: $KEYRING
EOF

# Every path apt would read or write is redirected into $WORK; the system's lists, caches,
# sources and pins are untouched. Sandbox user root: the private dirs are not _apt-readable.
APT_OPTS=(
  -q -o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$WORK/sources.d"
  -o "Dir::Etc::preferencesparts=$WORK/prefs.d" -o "Dir::State::Lists=$WORK/lists"
  -o "Dir::Cache=$WORK/cache" -o APT::Sandbox::User=root -o "APT::Architecture=$DEB_ARCH"
  -o Debug::NoLocking=1
)
apt-get "${APT_OPTS[@]}" update >"$WORK/update.log" 2>&1 \
  || { cat "$WORK/update.log" >&2; die "apt-get update of $SUITE from $MIRROR failed (network? set EMBODIED_RL_DEBIAN_MIRROR)"; }
(cd "$WORK" && apt-get "${APT_OPTS[@]}" download "mesa-vulkan-drivers/$SUITE" >"$WORK/download.log" 2>&1) \
  || { cat "$WORK/download.log" >&2; die "could not download mesa-vulkan-drivers from $SUITE"; }
DEB=$(ls "$WORK"/mesa-vulkan-drivers_*.deb)

# Unpack into a fresh directory, then swap it in (a half-finished install is never visible).
STAGE="$PREFIX.new"
rm -rf "$STAGE"
mkdir -p "$STAGE"
dpkg -x "$DEB" "$STAGE/root"
LIB_REL="root/usr/lib/$TRIPLET/libvulkan_lvp.so"
[[ -f "$STAGE/$LIB_REL" ]] || die "libvulkan_lvp.so not found in $(basename "$DEB")"

# The backports library links against bookworm system libraries (libllvm15, libdrm2, ...).
missing=$(ldd "$STAGE/$LIB_REL" | awk '/not found/ {print $1}' || true)
if [[ -n "$missing" ]]; then
  die "libvulkan_lvp.so needs system libraries that are missing: $(echo $missing). As root run: apt-get install -y libllvm15 libdrm2 libdrm-amdgpu1 libxcb-dri3-0 libxcb-present0 libxcb-randr0 libxcb-shm0 libxcb-sync1 libxcb-xfixes0 libxshmfence1 libwayland-client0 libx11-xcb1 libelf1 libzstd1 (then rerun)"
fi

rm -rf "$PREFIX"
mv "$STAGE" "$PREFIX"
cat >"$ICD_JSON.tmp" <<EOF
{
    "ICD": {
        "api_version": "$API_VERSION",
        "library_path": "$PREFIX/$LIB_REL"
    },
    "file_format_version": "1.0.0"
}
EOF
mv "$ICD_JSON.tmp" "$ICD_JSON"
basename "$DEB" >"$PREFIX/VERSION"
log "installed $(basename "$DEB"); use: export VK_ICD_FILENAMES=$ICD_JSON"
done_ok
