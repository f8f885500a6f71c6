#!/usr/bin/env bash
# The benchmark data of ../shared/bench/make-data.sh, generated in parallel
# shards for a many-core machine that has only minutes: the same reference
# (make_reference.py, seed 7), the same read simulation (dwgsim, 2x150,
# the same error and mutation rates), the same Illumina-style names with 8%
# PCR duplicates of which 15% are optical, aligned with bwa mem on every
# core into a BAM in aligner output order. Shard i simulates PAIRS/SHARDS
# pairs with dwgsim seed 11+i, and read names are numbered globally (the
# naming awk gets the shard's first pair number), so names stay unique and
# the lane split is the whole file's. The records are therefore not the
# same as make-data.sh's (one dwgsim seed there), but the shape is: same
# size, same duplicate rates, same layout.
#
#   make-data-sharded.sh OUTDIR PAIRS [SHARDS]    SHARDS default: nproc
#
# Needs bwa, dwgsim, samtools, python3, awk, gzip. Writes OUTDIR/ref.fa
# (+ index) and OUTDIR/reads-PAIRS.bam.
set -euo pipefail
out=${1:?outdir}; pairs=${2:?pairs}; shards=${3:-$(nproc)}
here=$(cd "$(dirname "$0")" && pwd)
shared=${SHARED_BENCH:-$here}
[ -f "$shared/make_reference.py" ] || shared=$here/../../shared/bench
mkdir -p "$out"; cd "$out"
bam=reads-$pairs.bam
[ -s "$bam" ] && { echo "$out/$bam exists"; exit 0; }
[ -s ref.fa ] || python3 "$shared/make_reference.py" ref.fa
[ -s ref.fa.fai ] || samtools faidx ref.fa
( [ -s ref.fa.bwt ] || bwa index ref.fa 2>/dev/null ) &
index_pid=$!

per=$(( (pairs + shards - 1) / shards ))
# The naming of make-data.sh (one awk program), with the pair counter
# starting at the shard's first pair.
rename() { # fastq.gz first_pair
  zcat "$1" | awk -v NPAIRS="$pairs" -v N0="$2" '
  function perturb(q,   i, c, out) { out = "";
    for (i = 1; i <= length(q); i++) { c = substr(q, i, 1);
      if (rand() < 0.3) c = sprintf("%c", 35 + int(rand() * 38)); out = out c }
    return out }
  function miscall(s,   i) { if (rand() < 0.5) return s; i = 1 + int(rand() * length(s));
    return substr(s, 1, i - 1) substr("ACGT", 1 + int(rand() * 4), 1) substr(s, i + 1) }
  BEGIN {n = N0}
  NR%4==1 {n++; srand(5+n); lane=1+int(n/(NPAIRS/4+1)); tile=1101+int(rand()*1578);
           x=1000+int(rand()*31000); y=1000+int(rand()*36000); dup=(rand()<0.08);
           if (rand() < 0.15) { dl=lane; dt=tile; dx=x+1+int(rand()*60); dy=y+1+int(rand()*60) }
           else { dl=1+int(rand()*4); dt=1101+int(rand()*1578); dx=1000+int(rand()*31000); dy=1000+int(rand()*36000) }
           next}
  NR%4==2 {s=$0; next}
  NR%4==0 {printf "@A00917:42:HKWJ3DSX2:%d:%d:%d:%d\n%s\n+\n%s\n", lane, tile, x, y, s, $0;
           if (dup) printf "@A00917:42:HKWJ3DSX2:%d:%d:%d:%d\n%s\n+\n%s\n", dl, dt, dx, dy, miscall(s), perturb($0)}'; }
pids=()
for ((i = 0; i < shards; i++)); do
  first=$(( i * per )); n=$(( pairs - first < per ? pairs - first : per ))
  [ "$n" -gt 0 ] || break
  (
    dwgsim -z $(( 11 + i )) -N "$n" -1 150 -2 150 -e 0.001-0.01 -E 0.001-0.012 -y 0.01 \
      -o 1 ref.fa "sim-$i" >/dev/null 2>&1
    rename "sim-$i.bwa.read1.fastq.gz" "$first" > "r1-$i.fq"
    rename "sim-$i.bwa.read2.fastq.gz" "$first" > "r2-$i.fq"
    rm -f "sim-$i".*
  ) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
wait "$index_pid"
r1=(); r2=()
for ((i = 0; i < ${#pids[@]}; i++)); do r1+=("r1-$i.fq"); r2+=("r2-$i.fq"); done
cat "${r1[@]}" > r1.fq; cat "${r2[@]}" > r2.fq; rm -f "${r1[@]}" "${r2[@]}"
bwa mem -t "$(nproc)" -R '@RG\tID:lane1\tSM:NA00001\tLB:lib1\tPL:ILLUMINA' ref.fa r1.fq r2.fq 2>/dev/null \
  | samtools view -@ 4 -b -o "$bam.tmp" -
mv "$bam.tmp" "$bam"
rm -f r1.fq r2.fq
echo "$out/$bam"
