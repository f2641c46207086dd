#!/usr/bin/env bash
# Runs docstore on a free-threaded CPython with the GIL disabled (docs/wheels.md, "Free-threaded
# CPython"): the core tests (tests/core, with the thread-stress tests of
# tests/core/test_freethreaded.py) and the thread-scaling benchmark against the same CPython
# built with the GIL. Not in CI (see the cost below).
#
#   bash scripts/test_freethreaded.sh                      # PARTS="test": the tests
#   PARTS="test bench" bash scripts/test_freethreaded.sh   # and benches/freethreaded.py
#   CPYTHON_TARBALL=Python-3.14.2.tar.xz bash scripts/test_freethreaded.sh   # a source of your own
#
# No package carries a free-threaded CPython (Debian has no python3.X-nogil, PyPI no interpreters),
# so CPython 3.14 is built from Debian's source package (`apt-get source python3.14` in a Debian
# sid chroot made with debootstrap, as scripts/test_wheels.sh makes one) twice: `--disable-gil`
# (3.14t) and with the GIL (3.14, the benchmark's baseline), upstream's source without Debian's
# patches and without PGO/LTO, the two builds alike. 3.14 is the first target: PyO3 0.30 refuses
# 3.13t ("PyO3 does not support the free-threaded build of CPython versions below 3.14"), and
# maturin 1.14 and later do too. docstore's cp314t and cp314 wheels are built here with maturin
# (its bundled sysconfig: neither interpreter runs outside the chroot), reusing cargo's release
# build (only the pyo3 crates and the link are redone), and installed into a venv per interpreter
# in the chroot with numpy, pytest, hypothesis and mypy from PyPI (numpy 2.5.5 ships cp314t wheels,
# no cp313t).
#
# The module does not declare `gil_used = false` yet (docs/wheels.md says why): CPython would turn
# the GIL back on at its import, so the tests run with PYTHON_GIL=0, which keeps it off whatever
# the modules declare, and the script says whether docstore declares it.
#
# Everything built is kept under build/freethreaded/ (the chroot with both CPythons and venvs, the
# maturin venv, the wheels): a second run only rebuilds the wheels and runs the tests. Delete the
# folder to start over. Needs root, debootstrap (apt-get install debootstrap), and on the first
# run Debian's mirror (with its source packages) and PyPI; the builds run under `nice`. The first
# run costs minutes of CPU (debootstrap ~2 min, each CPython ~5 CPU-minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
PARTS="${PARTS:-test}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
SOURCE="${SOURCE:-python3.14/sid}"          # the Debian source package CPython is built from
FLAVOURS="3.14t 3.14"                       # ABI tags: free-threaded, and the GIL baseline
MATURIN="maturin>=1.5,<2"                   # as .ci/run; 3.14t needs no particular release
TEST_DEPS="numpy pytest hypothesis mypy"    # what tests/core needs (mypy: test_stubs.py)
BUILD="$PWD/build/freethreaded"
ROOT="$BUILD/sid"
mkdir -p "$BUILD"
start=$(date +%s)

need() { command -v "$1" >/dev/null 2>&1 || { echo "ERROR: $1 not found ($2)"; exit 1; }; }
need debootstrap "apt-get install debootstrap"
[ "$(id -u)" -eq 0 ] || { echo "ERROR: debootstrap and chroot need root"; exit 1; }

# /proc, a /dev/shm (multiprocessing's semaphores) and the repository at /repo in the chroot,
# unmounted on exit.
mounted=()
cleanup() { for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || true; done; }
trap cleanup EXIT
mount_once() {  # TARGET MOUNT-ARGS...
  local target="$1"; shift
  mkdir -p "$target"
  if ! mountpoint -q "$target"; then mount "$@" "$target" && mounted+=("$target"); fi
}
in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

echo "--- chroot: Debian sid in $ROOT"
if [ ! -f "$ROOT/.ready" ]; then
  rm -rf "$ROOT"
  debootstrap --variant=minbase sid "$ROOT" "$MIRROR"
  # A mirror snapshot may carry an expired Release date.
  echo 'Acquire::Check-Valid-Until "false";' >"$ROOT/etc/apt/apt.conf.d/99no-check-valid-until"
  echo "deb-src $MIRROR ${SOURCE#*/} main" >"$ROOT/etc/apt/sources.list.d/source.list"
  in_root apt-get -q update >/dev/null
  # What CPython's configure needs for the modules pip, venv and the tests use.
  DEBIAN_FRONTEND=noninteractive in_root apt-get install -y -q --no-install-recommends \
    dpkg-dev gcc make pkg-config xz-utils ca-certificates libssl-dev zlib1g-dev libffi-dev \
    libbz2-dev liblzma-dev libexpat1-dev libzstd-dev libsqlite3-dev >/dev/null
  touch "$ROOT/.ready"
fi
mount_once "$ROOT/proc" -t proc proc
mount_once "$ROOT/dev/shm" -t tmpfs tmpfs
mount_once "$ROOT/repo" --bind "$PWD"

echo "--- CPython ${FLAVOURS// /, } from Debian's source package $SOURCE"
mkdir -p "$ROOT/src"
if [ -n "${CPYTHON_TARBALL:-}" ]; then
  rm -rf "$ROOT"/src/python3.* "$ROOT"/src/Python-*/
  cp "$CPYTHON_TARBALL" "$ROOT/src/python3.custom.orig.tar.${CPYTHON_TARBALL##*.tar.}"
elif ! ls "$ROOT"/src/python3.*.orig.tar.* >/dev/null 2>&1; then
  rm -rf "$ROOT"/src/Python-*/  # one source tree: the one fetched here
  if ! in_root sh -c "cd /src && apt-get source -q --download-only $SOURCE" >"$BUILD/source.log" 2>&1; then
    cat "$BUILD/source.log"
    echo "ERROR: no source for $SOURCE from $MIRROR: give CPYTHON_TARBALL=Python-3.14.X.tar.xz"
    exit 2
  fi
fi
cat >"$ROOT/src/build-cpython.sh" <<'EOF'
set -e
flavour="$1"; prefix="/opt/cpython-$flavour"
[ -x "$prefix/bin/python3" ] && exit 0
cd /src
src=$(ls -d Python-*/ 2>/dev/null | head -n 1)
[ -n "$src" ] || { tar xf python3.*.orig.tar.*; src=$(ls -d Python-*/ | head -n 1); }
rm -rf "build-$flavour" && mkdir "build-$flavour" && cd "build-$flavour"
case "$flavour" in *t) gil=--disable-gil ;; *) gil= ;; esac
# Upstream's source as Debian ships it, without Debian's patches (they move paths for dh);
# no PGO/LTO: both builds alike, so the benchmark compares the GIL and nothing else.
# (Checked on trixie's python3.13 source, which the mirror here serves: 3.13t builds and runs.)
"/src/$src/configure" -q --prefix="$prefix" $gil --with-ensurepip=install >/dev/null
nice make -s -j2 >/dev/null 2>make.log || { tail -40 make.log; exit 1; }
nice make -s install >/dev/null 2>>make.log || { tail -40 make.log; exit 1; }
EOF
for flavour in $FLAVOURS; do
  if [ ! -x "$ROOT/opt/cpython-$flavour/bin/python3" ]; then
    t0=$(date +%s)
    in_root sh /src/build-cpython.sh "$flavour"
    echo "CPython $flavour built in $(($(date +%s) - t0)) s"
  fi
done

echo "--- venvs: $TEST_DEPS from PyPI"
# pip in the chroot trusts what this machine's pip trusts (a proxy's CA, say).
ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
[ -f "$ca" ] && cp "$ca" "$ROOT/opt/host-ca.crt"
pip_env=(PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore)
[ -f "$ROOT/opt/host-ca.crt" ] && pip_env+=(PIP_CERT=/opt/host-ca.crt SSL_CERT_FILE=/opt/host-ca.crt)
for flavour in $FLAVOURS; do
  venv="/opt/venv-$flavour"
  if [ ! -f "$ROOT$venv/.ready" ]; then
    rm -rf "$ROOT$venv"
    in_root "/opt/cpython-$flavour/bin/python3" -m venv "$venv"
    in_root "${pip_env[@]}" "$venv/bin/python" -m pip install -q $TEST_DEPS
    touch "$ROOT$venv/.ready"
  fi
done

echo "--- wheels: cp314t and cp314 ($MATURIN)"
tools="$BUILD/tools"
if [ ! -x "$tools/bin/maturin" ]; then
  python3 -m venv "$tools" && "$tools/bin/python" -m pip install -q "$MATURIN"
fi
rm -rf "$BUILD/wheels"
t0=$(date +%s)
# No interpreter of either ABI runs outside the chroot: maturin takes their sysconfig from its
# bundled table. Linked against this machine's glibc (older than sid's), tagged plain linux.
nice "$tools/bin/maturin" build --release --compatibility linux -i python3.14t -i python3.14 \
  -o "$BUILD/wheels" >"$BUILD/maturin.log" 2>&1 || { tail -40 "$BUILD/maturin.log"; exit 1; }
echo "wheels built in $(($(date +%s) - t0)) s: $(cd "$BUILD/wheels" && ls)"
for flavour in $FLAVOURS; do
  tag="cp${flavour//./}"
  whl=("$BUILD"/wheels/docstore-*-cp314-"$tag"-*.whl)
  in_root "/opt/venv-$flavour/bin/python" -m pip install -q --no-deps --force-reinstall \
    "/repo/build/freethreaded/wheels/$(basename "${whl[0]}")"
done

failed=()
for part in $PARTS; do
  case "$part" in
  test)
    echo "--- tests/core on CPython 3.14t, GIL disabled"
    if in_root /opt/venv-3.14t/bin/python -W error::RuntimeWarning -c 'import docstore' 2>/dev/null; then
      echo "docstore declares gil_used = false: importing it keeps the GIL disabled"
    else
      echo "docstore does not declare gil_used = false: its import turns the GIL on; tests run with PYTHON_GIL=0"
    fi
    in_root env PYTHON_GIL=0 /opt/venv-3.14t/bin/python -c '
import sys, docstore, numpy
assert not sys._is_gil_enabled(), "the GIL is enabled"
print(f"CPython {sys.version.split()[0]}, GIL disabled, docstore from {docstore.__file__}")'
    # From /repo, docstore from the installed wheel (/repo/python is not on the path);
    # -p no:cacheprovider: nothing written into the repository. test_docs.py is left out: the
    # docs' examples use torch, pyarrow and datasets, not installed here.
    if ! in_root sh -c "cd /repo && PYTHON_GIL=0 /opt/venv-3.14t/bin/python -m pytest -q -p no:cacheprovider \
        tests/core --ignore tests/core/test_docs.py"; then
      failed+=("tests/core on 3.14t")
    fi
    in_root env PYTHON_GIL=0 /opt/venv-3.14t/bin/python -I /repo/scripts/smoke_test.py || failed+=("smoke test on 3.14t")
    ;;
  bench)
    echo "--- benches/freethreaded.py: 3.14t (GIL off, and PYTHON_GIL=1) against 3.14"
    in_root sh -c "cd /repo && /opt/venv-3.14t/bin/python -m benches.freethreaded \
      --python /opt/venv-3.14t/bin/python --python /opt/venv-3.14/bin/python ${BENCH_ARGS:-}" \
      || failed+=("bench")
    ;;
  *) echo "unknown part $part (test, bench)"; exit 2 ;;
  esac
done
echo "--- test_freethreaded.sh took $(($(date +%s) - start)) s"
[ "${#failed[@]}" -eq 0 ] || { echo "FAILED: ${failed[*]}"; exit 1; }
