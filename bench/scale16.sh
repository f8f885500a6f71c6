#!/usr/bin/env bash
# The thread-scaling table of issue 9, in one command, on a machine that
# reaches nothing outside: makes the benchmark data there from the bundle
# (bench/scale16-bundle.sh), then times alnsort and samtools at each thread
# count in memory, external (-m 100M), -n, -l 1 and -u, and writes a
# Markdown table with wall seconds, CPU seconds (user + system) and an md5
# of the decoded records per run.
#
#   bench/scale16.sh --bundle DIR [--pairs N] [--threads "1 2 4 8 16"]
#                    [--work DIR] [--out FILE] [--ref-from DIR] [--configs LIST]
#
# --pairs     read pairs of the generated data (default 2000000, the
#             benchmark's); the generator is deterministic for a given N.
# --ref-from  a directory that already holds ref.fa and its bwa index
#             (skips building them).
# --configs   a subset of: mem ext name l1 u (default all).
set -euo pipefail
bundle="" pairs=2000000 threads="1 2 4 8 16" work="" out="" ref_from=""
configs="mem ext name l1 u"
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --ref-from) ref_from=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    *) echo "scale16: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$bundle" ] || { echo "scale16: --bundle DIR is required" >&2; exit 2; }
bundle=$(cd "$bundle" && pwd)
work=${work:-$(mktemp -d "${TMPDIR:-/tmp}/scale16.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
out=${out:-$work/scale16.md}
export PATH="$bundle/bin:$PATH"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for t in alnsort samtools bwa dwgsim python3 awk zcat md5sum; do
  command -v "$t" >/dev/null || { echo "scale16: $t not found" >&2; exit 1; }
done

if [ -n "$ref_from" ]; then
  for f in "$ref_from"/ref.fa*; do ln -sf "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$work/"; done
fi
gen_start=$(date +%s)
bash "$bundle/data/make-data.sh" "$work" "$pairs" >&2
in=$work/reads-$pairs.bam
echo "scale16: data ready in $(( $(date +%s) - gen_start )) s: $in" >&2

opts_of() {
  case $1 in
    mem) echo "-m 2G" ;;
    ext) echo "-m 100M" ;;
    name) echo "-n -m 2G" ;;
    l1) echo "-l 1 -m 2G" ;;
    u) echo "-u -m 2G" ;;
    *) echo "scale16: unknown config $1" >&2; exit 2 ;;
  esac
}

# One timed run: wall, CPU (user + system of the command and its children)
# and the md5 of the decoded records.
run_one() { # tool threads opts...
  local tool=$1 t=$2; shift 2
  local o=$work/out.bam tmp=$work/tmp
  rm -rf "$o" "$tmp"; mkdir -p "$tmp"
  local cmd
  if [ "$tool" = alnsort ]; then
    cmd=(alnsort sort -@"$t" "$@" -T "$tmp/a" -o "$o" "$in")
  else
    cmd=(samtools sort -@"$t" "$@" -T "$tmp/s" -o "$o" "$in")
  fi
  local timing
  timing=$( { TIMEFORMAT='%R %U %S'; time "${cmd[@]}" 2>"$work/err.txt" >/dev/null; } 2>&1 ) || {
    echo "scale16: failed: ${cmd[*]}" >&2; cat "$work/err.txt" >&2; exit 1; }
  local wall user sys md5
  read -r wall user sys <<<"$timing"
  md5=$(samtools view "$o" | md5sum | cut -c1-12)
  printf '%s %s %s\n' "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')" "$md5"
}

{
  echo "# alnsort vs samtools thread scaling, $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
  echo "- $(samtools --version | head -1); $(alnsort --version)"
  echo "- input: reads-$pairs.bam ($(( $(stat -c %s "$in") / 1000000 )) MB), one run per cell"
  echo
  echo "| config | options | threads | samtools wall s | samtools CPU s | alnsort wall s | alnsort CPU s | ratio | records md5 (samtools / alnsort) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$out"
for cfg in $configs; do
  read -r -a opts <<<"$(opts_of "$cfg")"
  for t in $threads; do
    read -r sw sc smd5 <<<"$(run_one samtools "$t" "${opts[@]}")"
    read -r aw ac amd5 <<<"$(run_one alnsort "$t" "${opts[@]}")"
    ratio=$(awk -v s="$sw" -v a="$aw" 'BEGIN {printf "%.2f", s / a}')
    same=$([ "$smd5" = "$amd5" ] && echo "$amd5" || echo "$smd5 / $amd5 DIFFER")
    echo "| $cfg | \`${opts[*]}\` | $t | $sw | $sc | $aw | $ac | $ratio | $same |" | tee -a "$out" >&2
  done
done
rm -rf "$work/out.bam" "$work/tmp"
echo "scale16: table in $out" >&2
cat "$out"
