#!/usr/bin/env python3
"""Sorts every SAM/BAM (and, with their references, CRAM) file under the
given directories with alnsort and with samtools 1.24 (pysam), and says
where they differ: the held-out check of other projects' test data, run by
hand over checkouts of samtools, htslib, htsjdk, hts-specs and Picard (the
repository holds none of their files).

    .venv/bin/python scripts/conformance_sweep.py [--orders coord,name] [--alnsort BIN] DIR|FILE...

For each file and order it prints one line: `same`, `DIFFERS` (both sorted,
other output), `ALNSORT REFUSES` (samtools sorted it), `alnsort reads what
samtools refuses`, `both refuse`, `PANIC`/`TIMEOUT`, or `LEFTOVER` when a
failed run left its output behind; then counts. Exit status 1 when any
line is in capitals.
"""
import argparse
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORDERS = {"coord": [], "name": ["-n"], "tc": ["--template-coordinate"]}
EXTS = (".sam", ".bam", ".sam.gz", ".cram")


def reference_for(cram: Path):
    """A FASTA beside the CRAM (same stem, or the only one in its folder or
    its parent), as the projects' own tests pair them."""
    for d in (cram.parent, cram.parent.parent):
        cands = sorted(p for p in d.iterdir() if p.suffix in (".fa", ".fasta") and p.is_file())
        for p in cands:
            if cram.name.startswith(p.stem.split(".")[0]):
                return p
        if len(cands) == 1:
            return cands[0]
    return None


def samtools(args, timeout):
    code = "import pysam,sys; pysam.samtools.sort(*sys.argv[1:], catch_stdout=False)"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, timeout=timeout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", help="folders to search, or files")
    ap.add_argument("--orders", default="coord,name")
    ap.add_argument("--alnsort", default=str(ROOT / "target" / "release" / "alnsort"))
    ap.add_argument("--timeout", type=int, default=60)
    a = ap.parse_args()
    found = (p for d in map(Path, a.dirs) for p in ([d] if d.is_file() else d.rglob("*")))
    files = sorted(p for p in found if p.is_file() and p.name.endswith(EXTS) and p.stat().st_size > 0)
    counts = Counter()
    bad = False
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        for f in files:
            ref = []
            if f.suffix == ".cram":
                r = reference_for(f)
                if r is None:
                    continue
                ref = ["--reference", str(r)]
            for order in a.orders.split(","):
                opts = ORDERS[order]
                st_out, al_out = os.path.join(tmp, "st.sam"), os.path.join(tmp, "al.sam")
                for p in (st_out, al_out):
                    if os.path.exists(p):
                        os.remove(p)
                try:
                    st = samtools([*opts, *ref, "--no-PG", "-O", "sam", "-o", st_out, str(f)], a.timeout)
                    st_ok = st.returncode == 0
                except subprocess.TimeoutExpired:
                    st_ok = False
                try:
                    al = subprocess.run([a.alnsort, "sort", *opts, *ref, "--no-PG", "-O", "sam", "-T", tmp,
                                         "-o", al_out, str(f)], capture_output=True, timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    verdict = "TIMEOUT"
                    al = None
                if al is not None:
                    err = al.stderr.decode(errors="replace").strip().splitlines()
                    if al.returncode == 101 or any("panicked" in line for line in err):
                        verdict = "PANIC"
                    elif al.returncode == 0 and st_ok:
                        same = Path(st_out).read_bytes() == Path(al_out).read_bytes()
                        verdict = "same" if same else "DIFFERS"
                    elif al.returncode == 0:
                        verdict = "alnsort reads what samtools refuses"
                    elif st_ok:
                        verdict = "ALNSORT REFUSES"
                    else:
                        verdict = "both refuse"
                    if al.returncode != 0 and os.path.exists(al_out):
                        verdict += " LEFTOVER"
                    why = f"  [{err[-1][:200]}]" if al.returncode != 0 and err else ""
                else:
                    why = ""
                counts[verdict] += 1
                bad |= any(word.isupper() for word in verdict.split())
                print(f"{verdict:40} {order:5} {f}{why}", flush=True)
    print()
    for k, v in counts.most_common():
        print(f"{v:6}  {k}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
