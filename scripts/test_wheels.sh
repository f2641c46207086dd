#!/usr/bin/env bash
# Smoke-tests the wheels in dist/ (scripts/build_wheels.sh) on Pythons this machine does not have,
# with Debian's own packages (not in CI: it downloads a few hundred MB and takes minutes):
#
#   bash scripts/test_wheels.sh            # both parts below
#   PARTS=sid bash scripts/test_wheels.sh  # or PARTS=arm64
#
# sid    a Debian sid chroot (x86_64, debootstrap) with its CPython 3.14 (and the previous one,
#        3.13, which sid still ships) and Debian's numpy: a venv per version, the cp3X wheel installed
#        with pip (numpy from PyPI where Debian's is not built for that version),
#        scripts/smoke_test.py run in it.
# arm64  Debian bookworm for arm64 (debootstrap --foreign: packages unpacked, nothing executed),
#        its CPython 3.11 and numpy 1.24 run under qemu-aarch64-static (explicitly: no binfmt_misc
#        registration is needed or made); the cp311 aarch64 wheel unpacked into
#        /usr/local/lib/python3.11/dist-packages, scripts/smoke_test.py run there.
#
# Needs root, debootstrap and qemu-user-static (apt-get install debootstrap qemu-user-static) and
# Debian's mirror. Chroots go to build/test-wheels/ (kept between runs; delete it to start over).
set -euo pipefail
cd "$(dirname "$0")/.."
PARTS="${PARTS:-sid arm64}"
DIST="${DIST:-dist}"  # where the wheels are
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
ROOTS="$PWD/build/test-wheels"
mkdir -p "$ROOTS"
shopt -s nullglob
ran=()
failed=()

need() { command -v "$1" >/dev/null 2>&1 || { echo "ERROR: $1 not found ($2)"; exit 1; }; }
need debootstrap "apt-get install debootstrap"
[ "$(id -u)" -eq 0 ] || { echo "ERROR: debootstrap and chroot need root"; exit 1; }

# Mounts /proc for a chroot's commands, unmounted on exit.
mounted=()
cleanup() { for m in "${mounted[@]}"; do umount "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
with_proc() {
  if ! mountpoint -q "$1/proc"; then mount -t proc proc "$1/proc" && mounted+=("$1/proc"); fi
}

for part in $PARTS; do
  case "$part" in
  sid)
    root="$ROOTS/sid-amd64"
    if [ ! -x "$root/usr/bin/python3" ]; then
      echo "--- debootstrap sid (amd64) into $root"
      rm -rf "$root"
      debootstrap --variant=minbase --include=python3,python3-venv,python3-numpy,python3-tqdm,python3-pip \
        sid "$root" "$MIRROR"
      # sid carries more than one CPython (3.13, 3.14 and 3.15 when this was written): add every
      # one the wheels are built for. A mirror snapshot may carry an expired Release date.
      chroot "$root" apt-get -q -o Acquire::Check-Valid-Until=false update >/dev/null || true
      for pkg in $(chroot "$root" apt-cache search --names-only '^python3\.[0-9]+-venv$' | cut -d' ' -f1); do
        v="${pkg#python}"; v="${v%-venv}"; minor="${v#3.}"
        if [ "$minor" -ge 9 ] && [ "$minor" -le 14 ]; then
          DEBIAN_FRONTEND=noninteractive chroot "$root" apt-get install -y -q --no-install-recommends \
            "python$v" "$pkg" >/dev/null || echo "WARNING: could not install python$v in the sid chroot"
        fi
      done
    fi
    with_proc "$root"
    for py in "$root"/usr/bin/python3.[0-9]*; do
      v="$(basename "$py")"; v="${v#python}"
      [[ "$v" =~ ^3\.[0-9]+$ ]] || continue
      tag="cp${v/./}"
      wheels=("$DIST"/docstore-*-"$tag"-"$tag"-*x86_64*.whl)
      if [ "${#wheels[@]}" -eq 0 ]; then echo "no $tag x86_64 wheel in $DIST/: CPython $v skipped"; continue; fi
      # Debian's numpy where it is built for this version, else numpy and tqdm from PyPI.
      if chroot "$root" "python$v" -c "import numpy, tqdm" 2>/dev/null; then
        venv="--system-site-packages"; install="--no-index --no-deps"; deps="Debian's numpy"
      else
        venv=""; install=""; deps="numpy from PyPI"
      fi
      echo "--- CPython $v (Debian sid, x86_64, $deps): $(basename "${wheels[0]}")"
      mkdir -p "$root/tmp/wheels" && cp "${wheels[0]}" scripts/smoke_test.py "$root/tmp/wheels/"
      # pip in the chroot trusts what this machine's pip trusts (a proxy's CA, say).
      ca="${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
      [ -f "$ca" ] && cp "$ca" "$root/tmp/wheels/host-ca.crt"
      if chroot "$root" /bin/sh -ec "
          cd /tmp/wheels && rm -rf venv$v
          python$v -m venv $venv venv$v
          PATH=/tmp/wheels/venv$v/bin:/usr/bin:/bin
          if [ -f host-ca.crt ]; then export PIP_CERT=/tmp/wheels/host-ca.crt SSL_CERT_FILE=/tmp/wheels/host-ca.crt; fi
          ! command -v cargo
          python -m pip install -q $install $(basename "${wheels[0]}")
          python -I smoke_test.py"; then
        ran+=("CPython $v x86_64 (sid)")
      else
        failed+=("CPython $v x86_64 (sid)")
      fi
    done
    ;;
  arm64)
    need qemu-aarch64-static "apt-get install qemu-user-static"
    root="$ROOTS/bookworm-arm64"
    if [ ! -x "$root/usr/bin/python3.11" ]; then
      echo "--- debootstrap --foreign bookworm (arm64) into $root"
      rm -rf "$root"
      debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,python3-numpy,python3-tqdm \
        bookworm "$root" "$MIRROR"
      # The second stage would run arm64 maintainer scripts; unpacking is all Python needs.
      for deb in "$root"/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$root"; done
    fi
    # What update-alternatives would have linked (numpy needs libblas.so.3 and liblapack.so.3).
    for lib in blas/libblas.so.3 lapack/liblapack.so.3; do
      [ -e "$root/usr/lib/aarch64-linux-gnu/$lib" ] \
        && ln -sf "$lib" "$root/usr/lib/aarch64-linux-gnu/$(basename "$lib")"
    done
    wheels=("$DIST"/docstore-*-cp311-cp311-*aarch64*.whl)
    if [ "${#wheels[@]}" -eq 0 ]; then
      echo "no cp311 aarch64 wheel in $DIST/: arm64 skipped"; failed+=("arm64: no wheel"); continue
    fi
    echo "--- CPython 3.11 (Debian bookworm, aarch64 under qemu-user): $(basename "${wheels[0]}")"
    cp "$(command -v qemu-aarch64-static)" "$root/usr/bin/"
    site="$root/usr/local/lib/python3.11/dist-packages"
    rm -rf "$site/docstore" "$site"/docstore-*.dist-info && mkdir -p "$site"
    python3 -m zipfile -e "${wheels[0]}" "$site"
    cp scripts/smoke_test.py "$root/tmp/"
    with_proc "$root"
    if chroot "$root" /usr/bin/qemu-aarch64-static /usr/bin/python3.11 -I /tmp/smoke_test.py; then
      ran+=("CPython 3.11 aarch64 (bookworm, qemu)")
    else
      failed+=("CPython 3.11 aarch64 (bookworm, qemu)")
    fi
    ;;
  *) echo "unknown part $part (sid, arm64)"; exit 2 ;;
  esac
done

echo "--- summary"
for r in "${ran[@]}"; do echo "ok    $r"; done
for f in "${failed[@]}"; do echo "FAIL  $f"; done
[ "${#failed[@]}" -eq 0 ] && [ "${#ran[@]}" -gt 0 ]
