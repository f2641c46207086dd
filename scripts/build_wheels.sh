#!/usr/bin/env bash
# Build what PyPI gets: an sdist and binary wheels for CPython 3.9 to 3.14 on manylinux2014
# (glibc 2.17: RHEL 7/8, Ubuntu 18.04+, Debian 9+), x86_64 and aarch64, and for Windows x86_64,
# all in dist/. macOS wheels are built only where a macOS SDK is at hand (SDKROOT): they link
# Apple's frameworks (Security, CoreFoundation), which no package here provides; the release
# workflow (.github/workflows/wheels.yml) builds every platform natively.
#
#   bash scripts/build_wheels.sh
#
# Needs only Rust (rustup) and one Python >= 3.9 with pip: maturin, ziglang (zig is the C compiler
# and linker that targets glibc 2.17 and aarch64 from here), auditwheel and twine are installed
# from PyPI into a tools venv (build/wheel-tools). No other CPython is needed: `-i python3.X`
# falls back to maturin's bundled sysconfig for an interpreter that is absent.
#
# One wheel per CPython version: the bindings call CPython outside the limited API
# (PyUnicode_New + PyUnicode_DATA to write str objects in place, PyTuple_SET_ITEM,
# PyType_GenericAlloc for the Doc tuples), so an abi3 wheel is not possible (docs/wheels.md).
#
# Settings (environment):
#   PYTHONS="3.9 3.10 3.11 3.12 3.13 3.14"   CPython versions to build for
#   OSES="linux windows macos"                which systems (windows: x86_64-pc-windows-gnu with
#                                             mingw-w64's linker, apt-get installed if missing,
#                                             pyo3's generated import libraries; macos: x86_64 and
#                                             arm64 with zig, only when SDKROOT names a macOS SDK)
#   ARCHS="x86_64 aarch64"                    Linux architectures (aarch64: cross-compiled, the Rust
#                                             target is added with rustup when it is missing;
#                                             if it cannot be, the script says so, builds the
#                                             rest and exits 0)
#   CARGO_TARGET_DIR                          cargo's build directory (default: target/)
#   WHEEL_TOOLS_VENV=build/wheel-tools        where the build tools are installed
#   SDIST=1                                   0: no sdist
#   DIST=dist                                 where the files go (its docstore files are replaced)
#
# Every Rust compiler warning fails the build (each target must stay warning-free); every wheel
# is checked with `auditwheel show` (must be manylinux_2_17 for its arch) and
# `twine check --strict`, and the sdist's file list is checked (no benches, figures or CI files).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

PYTHONS="${PYTHONS:-3.9 3.10 3.11 3.12 3.13 3.14}"
OSES="${OSES:-linux windows macos}"
ARCHS="${ARCHS:-x86_64 aarch64}"
SDIST="${SDIST:-1}"
TOOLS="${WHEEL_TOOLS_VENV:-build/wheel-tools}"
DIST="${DIST:-dist}"
PY="${PYTHON:-$(command -v python3 || command -v python)}"

echo "--- build tools ($TOOLS)"
if [ ! -x "$TOOLS/bin/maturin" ] || [ ! -x "$TOOLS/bin/twine" ] || [ ! -x "$TOOLS/bin/auditwheel" ] \
    || ! "$TOOLS/bin/python" -c "import ziglang" 2>/dev/null; then
  mkdir -p "$TOOLS" && "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q "maturin>=1.5,<2" ziglang auditwheel twine
fi
TOOLS="$(cd "$TOOLS" && pwd)"
export PATH="$TOOLS/bin:$PATH"
maturin --version
echo "zig $(python -m ziglang version)"

mkdir -p "$DIST"
rm -f "$DIST"/docstore-*.whl "$DIST"/docstore-*.tar.gz
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
failed=0
skipped=()

if [ "$SDIST" = 1 ]; then
  echo "--- sdist"
  maturin sdist -o "$DIST"
  sdist=("$DIST"/docstore-*.tar.gz)
  # What must not be in it (pyproject.toml [tool.maturin] exclude), and what must.
  list="$(tar tzf "${sdist[0]}" | sed 's|^[^/]*/||')"
  if grep -E '^(benches/|docs/img/|\.ci/|\.gitignore$|target/|dist/|build/)' <<<"$list"; then
    echo "ERROR: the sdist carries files listed above that it should leave out"; failed=1
  fi
  for need in pyproject.toml Cargo.toml Cargo.lock rust/core/Cargo.toml rust/python/lib.rs \
      python/docstore/__init__.py README.md; do
    grep -qx "$need" <<<"$list" || { echo "ERROR: the sdist lacks $need"; failed=1; }
  done
  echo "sdist: $(wc -l <<<"$list") files, $(du -h "${sdist[0]}" | cut -f1)"
fi

interpreters=()
for v in $PYTHONS; do interpreters+=("python$v"); done

add_target() {  # the Rust target $1, or a warning and false
  rustup target list --installed 2>/dev/null | grep -qx "$1" && return 0
  command -v rustup >/dev/null 2>&1 && rustup target add "$1" && return 0
  echo "WARNING: the Rust target $1 is not installed and could not be added"; return 1
}
has_os() { [[ " $OSES " == *" $1 "* ]]; }
has_os linux || ARCHS=""

for arch in $ARCHS; do
  triple="$arch-unknown-linux-gnu"
  echo "--- wheels: $triple, CPython $PYTHONS"
  if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
    if ! command -v rustup >/dev/null 2>&1 || ! rustup target add "$triple"; then
      echo "WARNING: the Rust target $triple is not installed and could not be added" \
           "(rustup cannot reach its dist server?): no $arch wheels"
      skipped+=("$arch")
      continue
    fi
  fi
  # One maturin run per arch: docstore-core and the dependencies compile once, only the pyo3
  # crates and the link are redone per version. --zig links against glibc 2.17's symbols.
  if ! maturin build --release --zig --compatibility manylinux2014 --target "$triple" \
      -i "${interpreters[@]}" -o "$DIST" 2>&1 | tee "$log"; then
    echo "ERROR: maturin build failed for $triple"; failed=1; continue
  fi
  # cargo shows warnings only for this workspace's crates (dependencies' are capped): any is ours.
  if grep -E '^warning' "$log"; then
    echo "ERROR: the $triple build warns (every target must build warning-free)"; failed=1
  fi
done

if has_os windows; then
  triple=x86_64-pc-windows-gnu
  echo "--- wheels: $triple, CPython $PYTHONS"
  if ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1; then
    sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    { $sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q mingw-w64; } \
      >/dev/null 2>&1 || true
  fi
  if ! command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || ! add_target "$triple"; then
    echo "WARNING: no mingw-w64 or no Rust target $triple: no Windows wheels"; skipped+=(windows)
  # The GNU target needs no Windows SDK; pyo3 writes the import library of each python3X.dll
  # (generate-import-lib), so no Windows CPython is needed either. The check below refuses a
  # wheel that needs a DLL Windows does not ship (MinGW's libgcc_s or libwinpthread).
  elif ! maturin build --release --target "$triple" --features pyo3/generate-import-lib \
      -i "${interpreters[@]}" -o "$DIST" 2>&1 | tee "$log"; then
    echo "ERROR: maturin build failed for $triple"; failed=1
  elif grep -E '^warning' "$log"; then
    echo "ERROR: the $triple build warns (every target must build warning-free)"; failed=1
  fi
fi

if has_os macos; then
  for arch in x86_64 aarch64; do
    triple="$arch-apple-darwin"
    if [ -z "${SDKROOT:-}" ]; then
      echo "NOTE: no macOS wheels for $arch: SDKROOT names no macOS SDK (the release workflow builds them on macOS)"
      skipped+=("macos-$arch"); continue
    fi
    echo "--- wheels: $triple, CPython $PYTHONS"
    add_target "$triple" || { skipped+=("macos-$arch"); continue; }
    if ! maturin build --release --zig --target "$triple" -i "${interpreters[@]}" -o "$DIST" 2>&1 \
        | tee "$log"; then
      echo "ERROR: maturin build failed for $triple"; failed=1
    fi
  done
fi

echo "--- check"
shopt -s nullglob
wheels=("$DIST"/docstore-*.whl)
if [ "${#wheels[@]}" -eq 0 ]; then echo "ERROR: no wheel built"; exit 1; fi
for whl in "${wheels[@]}"; do
  case "$whl" in
    *-win_amd64.whl)
      # Every DLL the extension imports must ship with Windows (or be the CPython it is for).
      dlls="$(unzip -p "$whl" 'docstore/_docstore*.pyd' >"$log" && x86_64-w64-mingw32-objdump -p "$log" \
        | sed -n 's/.*DLL Name: //p' | sort -u | tr '\n' ' ')"
      if grep -Eiq 'lib(gcc|stdc|winpthread)' <<<"$dlls" || ! grep -Eiq 'python3[0-9]+\.dll' <<<"$dlls"; then
        echo "ERROR: $(basename "$whl") imports $dlls"; failed=1
      else
        echo "ok   $(basename "$whl")  $(du -h "$whl" | cut -f1)  (imports: $dlls)"
      fi
      continue ;;
    *-macosx_*.whl)
      echo "ok   $(basename "$whl")  $(du -h "$whl" | cut -f1)  (built, not run: no macOS here)"
      continue ;;
  esac
  out="$(auditwheel show "$whl" 2>&1)" || { echo "$out"; echo "ERROR: auditwheel show $whl"; failed=1; continue; }
  arch="$(sed -E 's/.*_(x86_64|aarch64)\.whl$/\1/' <<<"$whl")"
  if grep -q "manylinux_2_17_$arch" <<<"$out"; then
    echo "ok   $(basename "$whl")  $(du -h "$whl" | cut -f1)  (auditwheel: manylinux_2_17_$arch)"
  else
    echo "$out"; echo "ERROR: $whl is not manylinux_2_17_$arch"; failed=1
  fi
done
twine check --strict "$DIST"/docstore-* || failed=1

echo "--- $DIST/"
ls -l "$DIST"/
if [ "${#skipped[@]}" -gt 0 ]; then echo "NOTE: not built: ${skipped[*]}"; fi
if [ "$failed" -ne 0 ]; then echo "FAILED"; exit 1; fi
echo "OK: ${#wheels[@]} wheels$([ "$SDIST" = 1 ] && echo " and the sdist") in $DIST/, all checked"
