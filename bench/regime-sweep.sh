#!/usr/bin/env bash
# The spilling regime's sweep (issue 38, items 2 and 6), in one go on a
# many-core machine: builds alnsort (release) and the peers (mako,
# dupblaster: bench/peers-tools.sh), makes the 1x benchmark input if it is
# missing (bench/make-data-sharded.sh) and its 4x and 16x copies
# (bench/make-regime-data.py, in shards on every core), then times
# samtools, mako and alnsort with bench/regime.py (peak temporary disk
# sampled every 0.1 s, records checksummed) for each size, -@ and -m.
#
#   bench/regime-sweep.sh WORKDIR [SIZES] [THREADS] [MEMS] [RUNS]
#     SIZES default "1 4 16", THREADS "1 8 16", MEMS "768M 100M", RUNS 3
#
# Disk: WORKDIR holds the inputs (16x: ~1.7 GB), one output and one
# tool's temporary files at a time (16x at -m 100M: ~1.5 GB). Tables go to
# WORKDIR/regime-<size>x-t<threads>-m<mem>.md and are concatenated into
# WORKDIR/regime-sweep.md with the machine's description.
set -euo pipefail
work=${1:?workdir}; sizes=${2:-1 4 16}; threads=${3:-1 8 16}; mems=${4:-768M 100M}; runs=${5:-3}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$work"
cargo build --locked --release -p alnsort --manifest-path "$root/Cargo.toml"
bin=${CARGO_TARGET_DIR:-$root/target}/release/alnsort
tools=samtools,alnsort
if bash "$here/peers-tools.sh"; then tools=samtools,mako,alnsort; else echo "peers not built: samtools and alnsort only" >&2; fi
base=$work/reads-300000.bam
[ -s "$base" ] || { bash "$here/make-data-sharded.sh" "$work" 300000; }
for n in $sizes; do
  [ "$n" = 1 ] && continue
  [ -s "$work/x$n.bam" ] || python3 "$here/make-regime-data.py" "$base" "$work/x$n.bam" \
    --copies "$n" --shards "$(nproc)"
done
summary=$work/regime-sweep.md
{
  echo "# The spilling regime's sweep: $(date -u +%F), $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GB"
  echo
  echo "$(lscpu | grep -m1 'Model name' || true); samtools $(samtools --version | head -1); alnsort $(git -C "$root" rev-parse --short HEAD)"
  echo
} > "$summary"
for n in $sizes; do
  inp=$base; [ "$n" = 1 ] || inp=$work/x$n.bam
  for t in $threads; do
    for m in $mems; do
      out=$work/regime-${n}x-t$t-m$m.md
      python3 "$here/regime.py" --input "$inp" --mem "$m" --threads "$t" --runs "$runs" \
        --tools "$tools" --alnsort "$bin" --tmp "$work" --out "$out"
      { echo "## ${n}x, -@$t, -m $m"; echo; cat "$out"; echo; } >> "$summary"
    done
  done
done
echo "$summary"
