#!/usr/bin/env bash
# The thread-scaling table of issue 22 (item 6), in one command, on a machine
# that reaches nothing outside: makes the benchmark data there from the
# bundle (bench/scale16-bundle.sh) with bench/make-data-sharded.sh on every
# core, then times alnsort, samtools and mako (dupblaster | mako beside
# `sort --markdup`) along a plan of "config threads tools..." lines, and
# writes a Markdown table with wall seconds, CPU seconds (user + system),
# alnsort's serial seconds (--stats-json) and an md5 of the decoded records
# per run. Rows are appended as they finish, so a run cut short keeps what
# it measured.
#
#   bench/scale16.sh --bundle DIR [--pairs N] [--work DIR] [--out FILE]
#                    [--ref-from DIR] [--configs LIST]
#
# --pairs     read pairs of the generated data (default 2000000, the
#             benchmark's size); the generator is deterministic for a given N.
# --ref-from  a directory that already holds ref.fa and its bwa index
#             (skips building them).
# --configs   a subset of: mem ext name tc l1 u markdup (default all but u);
#             PLAN (environment) replaces the list of "config threads tools..."
#             lines (see the default plan at the end).
set -euo pipefail
bundle="" pairs=2000000 work="" out="" ref_from=""
configs="mem ext name tc l1 markdup"
while [ $# -gt 0 ]; do
  case $1 in
    --bundle) bundle=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
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
for t in alnsort samtools mako dupblaster bwa dwgsim python3 awk zcat md5sum; do
  command -v "$t" >/dev/null || { echo "scale16: $t not found" >&2; exit 1; }
done

if [ -n "$ref_from" ]; then
  for f in "$ref_from"/ref.fa*; do ln -sf "$(cd "$(dirname "$f")" && pwd)/$(basename "$f")" "$work/"; done
fi
gen_start=$(date +%s)
SHARED_BENCH="$bundle/data" bash "$bundle/make-data-sharded.sh" "$work" "$pairs" >&2
in=$work/reads-$pairs.bam
echo "scale16: data ready in $(( $(date +%s) - gen_start )) s: $in" >&2

opts_of() {
  case $1 in
    mem) echo "-m 2G" ;;
    ext) echo "-m 100M" ;;
    name) echo "-n -m 2G" ;;
    tc) echo "--template-coordinate -m 2G" ;;
    l1) echo "-l 1 -m 2G" ;;
    u) echo "-u -m 2G" ;;
    markdup) echo "-m 2G" ;;
    *) echo "scale16: unknown config $1" >&2; exit 2 ;;
  esac
}
mako_order() {
  case $1 in name) echo "queryname::natural" ;; tc) echo "template-coordinate" ;; *) echo coordinate ;; esac
}

# One timed run: wall, CPU (user + system of the command and its children),
# the md5 of the decoded records and, for alnsort, the serial seconds of
# --stats-json (read_scan + read_push + write_consume).
run_one() { # tool cfg threads
  local tool=$1 cfg=$2 t=$3
  local o=$work/out.bam tmp=$work/tmp js=$work/stats.json
  rm -rf "$o" "$tmp" "$js"; mkdir -p "$tmp"
  local -a opts; read -r -a opts <<<"$(opts_of "$cfg")"
  local mem=${opts[-1]} level=6
  [ "$cfg" = l1 ] && level=1
  local -a cmd
  case $tool in
    alnsort)
      if [ "$cfg" = markdup ]; then
        cmd=(alnsort sort --no-progress --markdup -@"$t" "${opts[@]}" -T "$tmp" --stats-json "$js" -o "$o" "$in")
      else
        cmd=(alnsort sort --no-progress -@"$t" "${opts[@]}" -T "$tmp" --stats-json "$js" -o "$o" "$in")
      fi ;;
    samtools) cmd=(samtools sort -@"$t" "${opts[@]}" -T "$tmp/s" -o "$o" "$in") ;;
    mako)
      local -a lv=(--compression-level "$level")
      [ "$cfg" = u ] && lv=(--compression-level 0)
      cmd=(mako -i "$in" -o "$o" --order "$(mako_order "$cfg")" --max-memory "$mem" "${lv[@]}" --threads "$t" -T "$tmp") ;;
    dupblaster-mako)
      cmd=(bash -c "set -o pipefail; dupblaster -i '$in' -o - --ignore-unmated --metrics-prefix '$tmp/db' --tmp-dir '$tmp' --compression-level 0 | mako -i /dev/stdin -o '$o' --order coordinate --max-memory $mem --compression-level 6 --threads $t -T '$tmp'") ;;
    *) echo "scale16: unknown tool $tool" >&2; exit 2 ;;
  esac
  local timing
  timing=$( { TIMEFORMAT='%R %U %S'; time "${cmd[@]}" 2>"$work/err.txt" >/dev/null; } 2>&1 ) || {
    echo "scale16: failed: ${cmd[*]}" >&2; cat "$work/err.txt" >&2; echo "- - - -"; return 0; }
  local wall user sys md5 serial=-
  read -r wall user sys <<<"$timing"
  md5=$(samtools view -@ 8 "$o" | md5sum | cut -c1-12)
  if [ -s "$js" ]; then
    serial=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["serial_seconds"]; print("%.2f" % sum(s.values()))' "$js")
  fi
  printf '%s %s %s %s\n' "$wall" "$(awk -v u="$user" -v s="$sys" 'BEGIN {printf "%.2f", u + s}')" "$md5" "$serial"
}

{
  echo "# alnsort vs samtools and mako: thread scaling, $(date -u +%Y-%m-%d)"
  echo
  echo "- machine: $(nproc) cores ($(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)), $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo), $(uname -sr)"
  echo "- $(samtools --version | head -1); $(mako --version 2>&1 | head -1); $(alnsort --version)"
  echo "- input: reads-$pairs.bam ($(( $(stat -c %s "$in") / 1000000 )) MB, $(samtools view -c -@ 8 "$in") records; bench/make-data-sharded.sh), one run per cell, level 6 unless said"
  echo "- wall / CPU seconds (user + system); serial = alnsort's --stats-json serial_seconds summed; md5 of \`samtools view\` of each output"
  echo
  echo "| config | options | threads | tool | wall s | CPU s | serial s | records md5 |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$out"
# Each line of the plan: config threads tools...
plan=${PLAN:-"mem 16 alnsort samtools mako
mem 8 alnsort samtools
mem 4 alnsort samtools
mem 1 alnsort
ext 16 alnsort samtools mako
ext 4 alnsort samtools
ext 1 alnsort
name 16 alnsort samtools mako
tc 16 alnsort samtools mako
l1 16 alnsort samtools mako
markdup 16 alnsort dupblaster-mako
mem 2 alnsort samtools
mem 1 samtools"}
while read -r cfg t tools; do
  [ -n "$cfg" ] || continue
  case " $configs " in *" $cfg "*) ;; *) continue ;; esac
  for tool in $tools; do
    read -r w c m s <<<"$(run_one "$tool" "$cfg" "$t")"
    echo "| $cfg | \`$(opts_of "$cfg")\` | $t | $tool | $w | $c | $s | $m |" | tee -a "$out" >&2
  done
done <<<"$plan"
rm -rf "$work/out.bam" "$work/tmp"
echo "scale16: table in $out" >&2
