#!/usr/bin/env bash
# Runs docstore on a free-threaded CPython (docs/wheels.md, "Free-threaded CPython"): the core
# tests (tests/core, with the thread-stress tests of tests/core/test_freethreaded.py), the smoke
# test, optionally the torch loader tests, and the thread-scaling benchmark against the same
# CPython built with the GIL. Nothing sets PYTHON_GIL: the module declares `gil_used = false`, so
# the GIL must stay disabled after its import, and the script checks that it does.
#
#   bash scripts/test_freethreaded.sh                      # PARTS="test": the tests
#   PARTS="test bench" bash scripts/test_freethreaded.sh   # and benches/freethreaded.py
#   PARTS="test torch" bash scripts/test_freethreaded.sh   # and tests/loaders/test_torch.py
#   CPYTHON_TARBALL=Python-3.14.4.tar.xz bash scripts/test_freethreaded.sh   # a source of your own
#
# No package carries a free-threaded CPython (Debian has no python3.X-nogil, PyPI no interpreters),
# so CPython 3.14 is built here twice from upstream's source: `--disable-gil` (3.14t) and with the
# GIL (3.14, the benchmark's baseline), without PGO/LTO, the two builds alike. The source is the
# `.orig` tarball of a distribution's python3.14 source package (upstream's tarball, repacked
# without Debian's patches): Ubuntu's archive first (resolute), then Debian's (sid), whichever
# serves it. The tarball's sha256 is checked against that suite's Sources index, and the index
# against the suite's InRelease (whose signature gpgv checks where the archive's keyring is
# installed: Debian's is on Debian machines, Ubuntu's is not). CPython builds natively with the
# distribution's compiler (checked: gcc 12 on Debian 12) and these headers (Debian's packages:
#   apt-get install libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev
# ): ssl for pip, the rest for what the tests import.
#
# 3.14 is the first target: PyO3 0.30 refuses 3.13t ("PyO3 does not support the free-threaded
# build of CPython versions below 3.14"). docstore's cp314t and cp314 wheels are built with maturin
# against the two interpreters, reusing cargo's release build (only the pyo3 crates and the link
# are redone), and installed into a venv per interpreter with what the tests need from PyPI
# (TEST_DEPS below); `torch` adds PyPI's torch (2.15 has a cp314t wheel for Linux x86_64; it pulls
# CUDA's libraries, about 3 GB).
#
# Everything built is kept under build/freethreaded/ (the source, both CPythons and venvs, the
# maturin venv, the wheels): a second run only rebuilds the wheels and runs the tests. Delete the
# folder to start over. Not in CI: the first run costs two CPython builds, each 4-11 minutes of
# wall on 2 cores (259 s for 3.14t at a light load, 11 minutes beside two other compiles), the
# venvs from PyPI (about 400 MB each; torch: 3.5 GB more); later runs cost the wheels (about a
# minute) and the tests (tests/core: 0.5-2 minutes). The release workflow covers 3.14t in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
unset PYTHON_GIL  # the import must leave the GIL disabled on its own
PARTS="${PARTS:-test}"
SERIES=3.14                                  # the python3.X source package
# Archives and suites to take the source from, in order.
ARCHIVES="${ARCHIVES:-http://archive.ubuntu.com/ubuntu|resolute http://deb.debian.org/debian|sid}"
FLAVOURS="3.14t 3.14"                        # ABI tags: free-threaded, and the GIL baseline
MATURIN="maturin>=1.5,<2"                    # as .ci/run; 3.14t needs no particular release
# What tests/core needs: docstore's own dependencies (numpy, tqdm), mypy (test_stubs.py), ml_dtypes
# (bfloat16), pyarrow and datasets (test_types.py's Arrow and Hugging Face cases). Each has a
# cp314t wheel, or is pure Python.
TEST_DEPS="numpy tqdm pytest hypothesis mypy ml_dtypes pyarrow datasets"
BUILD="$PWD/build/freethreaded"
SRC="$BUILD/src"
mkdir -p "$SRC"
start=$(date +%s)

echo "--- CPython source"
tarball=""
if [ -n "${CPYTHON_TARBALL:-}" ]; then
  tarball="$(realpath "$CPYTHON_TARBALL")"
else
  tarball=$(ls "$SRC"/python"$SERIES"_*.orig.tar.* 2>/dev/null | tail -n 1 || true)
  for entry in $ARCHIVES; do
    [ -z "$tarball" ] || break
    # Prints the verified tarball's path; fails (and says why) when the suite has none.
    tarball=$(python3 - "${entry%|*}" "${entry#*|}" "python$SERIES" "$SRC" <<'PY' || true
import hashlib, lzma, os, re, shutil, subprocess, sys, urllib.request

archive, suite, package, dest = sys.argv[1:]

def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()

def fail(why: str) -> None:
    sys.exit(f"{archive} {suite}: {why}")

try:
    release = get(f"{archive}/dists/{suite}/InRelease")
    index_xz = get(f"{archive}/dists/{suite}/main/source/Sources.xz")
except OSError as e:
    fail(f"no index ({e})")
# The index against InRelease's SHA256 list; InRelease's signature where the keyring is here.
listed = re.search(rb"^ ([0-9a-f]{64}) +\d+ main/source/Sources\.xz$", release, re.M)
if not listed or listed.group(1).decode() != hashlib.sha256(index_xz).hexdigest():
    fail("Sources.xz does not match InRelease")
keyring = {"debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
           "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg"}[
    "ubuntu" if "ubuntu" in archive else "debian"]
if shutil.which("gpgv") and os.path.exists(keyring):
    if subprocess.run(["gpgv", "--keyring", keyring], input=release, capture_output=True).returncode:
        fail(f"InRelease's signature does not verify with {keyring}")
    print(f"{archive} {suite}: InRelease signed ({keyring})", file=sys.stderr)
else:
    print(f"{archive} {suite}: InRelease's signature not checked (no {keyring})", file=sys.stderr)
# The package's stanza: its pool folder and its .orig tarball's sha256 (the last version listed).
found = None
for stanza in lzma.decompress(index_xz).decode().split("\n\n"):
    if re.search(rf"^Package: {re.escape(package)}$", stanza, re.M):
        folder = re.search(r"^Directory: (\S+)$", stanza, re.M).group(1)
        sums = stanza.split("Checksums-Sha256:", 1)[1]
        orig = re.search(rf"^ ([0-9a-f]{{64}}) \d+ ({re.escape(package)}_[^ ]+\.orig\.tar\.\w+)$", sums, re.M)
        if orig:
            found = (folder, orig.group(2), orig.group(1))
if not found:
    fail(f"no {package} source in Sources")
folder, name, sha256 = found
try:
    data = get(f"{archive}/{folder}/{name}")
except OSError as e:
    fail(f"{name}: {e}")
if hashlib.sha256(data).hexdigest() != sha256:
    fail(f"{name}: sha256 differs from Sources'")
path = os.path.join(dest, name)
with open(path + ".part", "wb") as f:
    f.write(data)
os.replace(path + ".part", path)
print(f"{archive}/{folder}/{name}: sha256 {sha256} as Sources lists", file=sys.stderr)
print(path)
PY
    )
  done
  if [ -z "$tarball" ]; then
    echo "ERROR: no python$SERIES source from: $ARCHIVES; give CPYTHON_TARBALL=Python-3.14.X.tar.xz"
    exit 2
  fi
fi
echo "source: $tarball"

echo "--- CPython ${FLAVOURS// /, }, built natively"
for h in openssl/ssl.h zlib.h ffi.h bzlib.h lzma.h sqlite3.h; do
  echo "#include <$h>" | cc -E - >/dev/null 2>&1 || {
    echo "ERROR: no <$h>: apt-get install libssl-dev zlib1g-dev libffi-dev libbz2-dev liblzma-dev libsqlite3-dev"
    exit 1
  }
done
for flavour in $FLAVOURS; do
  prefix="$BUILD/cpython-$flavour"
  [ -x "$prefix/bin/python$flavour" ] && continue
  t0=$(date +%s)
  tree="$SRC/$(basename "$tarball" | sed 's/\.tar\..*//')"
  if [ ! -f "$tree/configure" ]; then
    rm -rf "$tree" "$tree.part" && mkdir -p "$tree.part"
    tar xf "$tarball" -C "$tree.part" --strip-components=1 && mv "$tree.part" "$tree"
  fi
  rm -rf "$BUILD/build-$flavour" && mkdir "$BUILD/build-$flavour"
  case "$flavour" in *t) gil=--disable-gil ;; *) gil= ;; esac
  # No PGO/LTO: both builds alike, so the benchmark compares the GIL and nothing else.
  (cd "$BUILD/build-$flavour" && "$tree/configure" -q --prefix="$prefix" $gil --with-ensurepip=install \
    && nice make -s -j"${JOBS:-2}" && nice make -s install) >"$BUILD/build-$flavour.log" 2>&1 \
    || { tail -40 "$BUILD/build-$flavour.log"; exit 1; }
  echo "CPython $flavour built in $(($(date +%s) - t0)) s"
done
"$BUILD/cpython-3.14t/bin/python3.14t" -c 'import sysconfig; assert sysconfig.get_config_var("Py_GIL_DISABLED")'

echo "--- venvs: $TEST_DEPS from PyPI"
for flavour in $FLAVOURS; do
  venv="$BUILD/venv-$flavour"
  if [ ! -f "$venv/.ready" ]; then
    rm -rf "$venv"
    "$BUILD/cpython-$flavour/bin/python$flavour" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --only-binary=:all: $TEST_DEPS
    touch "$venv/.ready"
  fi
done
if [[ " $PARTS " == *" torch "* ]] && ! "$BUILD/venv-3.14t/bin/python" -c 'import torch' 2>/dev/null; then
  "$BUILD/venv-3.14t/bin/python" -m pip install -q --only-binary=:all: torch
fi

echo "--- wheels: cp314t and cp314 ($MATURIN)"
tools="$BUILD/tools"
if [ ! -x "$tools/bin/maturin" ]; then
  python3 -m venv "$tools" && "$tools/bin/python" -m pip install -q "$MATURIN"
fi
rm -rf "$BUILD/wheels"
t0=$(date +%s)
# Tagged plain linux: these wheels are for the venvs here, not for shipping.
nice "$tools/bin/maturin" build --release --compatibility linux \
  -i "$BUILD/cpython-3.14t/bin/python3.14t" -i "$BUILD/cpython-3.14/bin/python3.14" \
  -o "$BUILD/wheels" >"$BUILD/maturin.log" 2>&1 || { tail -40 "$BUILD/maturin.log"; exit 1; }
echo "wheels built in $(($(date +%s) - t0)) s: $(cd "$BUILD/wheels" && ls)"
for flavour in $FLAVOURS; do
  whl=("$BUILD"/wheels/docstore-*-cp314-"cp${flavour//./}"-*.whl)
  "$BUILD/venv-$flavour/bin/python" -m pip install -q --no-deps --force-reinstall "${whl[0]}"
done

py="$BUILD/venv-3.14t/bin/python"
failed=()
for part in $PARTS; do
  case "$part" in
  test | torch)
    # -W error::RuntimeWarning: CPython warns when an import turns the GIL back on.
    "$py" -W error::RuntimeWarning -c '
import sys, docstore, numpy
assert not sys._is_gil_enabled(), "importing docstore enabled the GIL"
print(f"CPython {sys.version.split()[0]}, GIL disabled after importing docstore from {docstore.__file__}")' \
      || { failed+=("the GIL stays disabled"); continue; }
    # From the repository, docstore from the installed wheel (python/ is not on the path);
    # -p no:cacheprovider: nothing written into the repository. test_docs.py is left out: the
    # docs' examples need Ray, Spark and torch, not installed here.
    if [ "$part" = test ]; then
      echo "--- tests/core on CPython 3.14t"
      "$py" -m pytest -q -p no:cacheprovider tests/core --ignore tests/core/test_docs.py \
        || failed+=("tests/core on 3.14t")
      (cd / && "$py" -I "$OLDPWD/scripts/smoke_test.py") || failed+=("smoke test on 3.14t")
    else
      echo "--- tests/loaders/test_torch.py on CPython 3.14t"
      "$py" -m pytest -q -p no:cacheprovider tests/loaders/test_torch.py || failed+=("torch tests on 3.14t")
    fi
    ;;
  bench)
    echo "--- benches/freethreaded.py: 3.14t (GIL off, and PYTHON_GIL=1) against 3.14"
    "$py" -m benches.freethreaded --python "$py" --python "$BUILD/venv-3.14/bin/python" ${BENCH_ARGS:-} \
      || failed+=("bench")
    ;;
  *) echo "unknown part $part (test, torch, bench)"; exit 2 ;;
  esac
done
echo "--- test_freethreaded.sh took $(($(date +%s) - start)) s"
[ "${#failed[@]}" -eq 0 ] || { echo "FAILED: ${failed[*]}"; exit 1; }
