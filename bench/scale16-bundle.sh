#!/usr/bin/env bash
# Packs what bench/scale16.sh needs on a machine that reaches nothing
# outside: the alnsort build (debug info stripped), samtools and the shared
# libraries `ldd` lists for it, bwa, dwgsim, mako and dupblaster (from
# bench/peers-tools.sh), and the benchmark data generator (../shared/bench
# and bench/make-data-sharded.sh). Refuses a bundle over 64 MiB, the most a
# command may carry there.
#
#   bench/scale16-bundle.sh [BUNDLE_DIR]     default: target/scale16-bundle
#
# The bundle is a directory under target/ (ignored by git); carry it with
# the command that runs bench/scale16.sh --bundle BUNDLE_DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$root/target/scale16-bundle}
shared=${SHARED_BENCH:-$root/../shared/bench}
alnsort=${ALNSORT_BIN:-$root/target/release/alnsort}
limit=$((64 * 1024 * 1024))

for f in "$alnsort" "$shared/make-data.sh" "$shared/make_reference.py"; do
  [ -e "$f" ] || { echo "scale16-bundle: missing $f" >&2; exit 1; }
done
tools=()
for t in samtools bwa dwgsim; do
  p=$(command -v "$t") || { echo "scale16-bundle: $t is not installed here" >&2; exit 1; }
  tools+=("$p")
done

rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/data"
objcopy --strip-debug "$alnsort" "$bundle/bin/alnsort"
for p in "${tools[@]}"; do cp -L "$p" "$bundle/bin/"; done
# The libraries samtools, bwa and dwgsim link against, except the C
# library and the loader, which must be the machine's own.
for p in "${tools[@]}"; do
  ldd "$p" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  case $(basename "$lib") in
    libc.so*|ld-linux*|libm.so*|libpthread.so*|libdl.so*|librt.so*) ;;
    *) cp -L "$lib" "$bundle/lib/" ;;
  esac
done
cp "$shared/make-data.sh" "$shared/make_reference.py" "$bundle/data/"
cp "$root/bench/scale16.sh" "$root/bench/make-data-sharded.sh" "$bundle/"
# This machine's awk as `awk`: the naming program seeds rand() per pair
# (srand(5 + n)) so that both reads of a pair get the same name, and another
# machine's awk may not reseed the same way (one lent machine gave the two
# files of a pair different names).
cp -L "$(command -v awk)" "$bundle/bin/awk"
# The peers, built by bench/peers-tools.sh (Rust; they link only the C library).
for t in mako dupblaster; do
  p=$root/.tools/peers/bin/$t
  [ -x "$p" ] || { echo "scale16-bundle: $p missing (bash bench/peers-tools.sh builds it)" >&2; exit 1; }
  objcopy --strip-debug "$p" "$bundle/bin/$t"
done

size=$(du -sb "$bundle" | cut -f1)
if [ "$size" -gt "$limit" ]; then
  echo "scale16-bundle: $bundle is $size bytes, over the 64 MiB limit" >&2
  exit 1
fi
echo "$bundle: $size bytes ($(( (size + 1048575) / 1048576 )) MiB of 64)"
