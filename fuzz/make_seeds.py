"""Writes the small committed seed corpus (fuzz/corpus/<target>/seed-*).
Run from the repository root: python3 fuzz/make_seeds.py"""
import os, random, struct, sys, zlib
sys.path.insert(0, "tests/safety")
import safety_util as u

root = "fuzz/corpus"
def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"seed-{name}"), "wb") as fh:
        fh.write(data)

recs = u.records(20)
# bgzf_block
put("bgzf_block", "eof", u.EOF_BLOCK)
put("bgzf_block", "records", u.bgzf_block(b"".join(recs)))
put("bgzf_block", "stored", u.bgzf_block(b"ACGT" * 50, level=0))
put("bgzf_block", "bad-crc", u.bgzf_block(b"hello", crc=1))
put("bgzf_block", "two-blocks", u.bgzf_block(b"abc") + u.EOF_BLOCK)
# bam_record: selector byte (n_ref = sel % 4) + record without block_size
put("bam_record", "plain", b"\x02" + u.Rec().raw())
put("bam_record", "unmapped", b"\x02" + u.Rec(ref_id=-1, pos=-1, flag=4, cigar=[]).raw())
put("bam_record", "aux-all", b"\x03" + u.Rec(aux=b"XAAxXCc\xffXSs\x01\x80XIi\x07\x00\x00\x00XFf\x00\x00\x80?XZZhi\x00XHH1AE\x00XBBi\x02\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00RGZrg1\x00").raw())
put("bam_record", "paired", b"\x02" + u.Rec(flag=0x63, next_ref_id=1, next_pos=500, tlen=-300, cigar=[(3, "S"), (5, "M"), (2, "I"), (4, "D")], seq="ACGTACGTAC").raw())
cg = u.Rec(cigar=[(10, "S"), (1, "N")], aux=b"CGBI" + struct.pack("<I", 1) + struct.pack("<I", 10 << 4)).raw()
put("bam_record", "cg-cigar", b"\x02" + cg)
# sam_line (header: chr1..chr3)
put("sam_line", "basic", u.sam_line().encode())
put("sam_line", "tags", ("r2\t99\tchr2\t1000\t30\t5S3M2I\t=\t1200\t300\tACGTACGTAC\t*\tNM:i:1\tXA:A:x\tXF:f:1.5\tXZ:Z:hello world\tXH:H:1AE3\tXB:B:s,1,-2,3\tXC:B:f,0.5,1e3\tMC:Z:10M\tRG:Z:rg1\n").encode())
put("sam_line", "unmapped", b"u1\t4\t*\t0\t0\t*\t*\t0\t0\tNNNN\t!!!!\n")
put("sam_line", "several", u.valid_sam_lines(5).encode() + b"bad\tline\n" + b"r9\t16\tchr3\t7\t0\t4M\tchr1\t9\t0\tACGT\tIIII\tCB:Z:AAC-1\n")
# header: BAM binary header, and SAM header text
put("header", "bam", u.bam_header())
put("header", "bam-norefs", u.bam_header(text="@HD\tVN:1.6\n@CO\thi\n", refs=[]))
put("header", "sam", (u.SAM_HEADER + "@RG\tID:a\tLB:x\tSM:s\n@PG\tID:p\tPN:p\n@CO\tc\n").encode())
put("header", "sam-an", b"@HD\tVN:1.6\tSO:coordinate\n@SQ\tSN:chr1\tLN:100\tAN:1,one\n@SQ\tSN:chrM\tLN:16569\n")
# sort_tiny_budget: 4 selector bytes then 6 bytes per record
rng = random.Random(5)
for i, (order, budget, runs) in enumerate([(0, 0, 1), (1, 3, 2), (3, 10, 0), (4, 1, 3), (7, 0, 1), (2, 255, 0)]):
    body = bytes(rng.randrange(256) for _ in range(6 * rng.randrange(20, 300)))
    put("sort_tiny_budget", f"o{order}-b{budget}-r{runs}", bytes([order, budget, runs, i]) + body)

# cram: small CRAMs written by samtools 1.24 (pysam) against the harness's
# fixed reference (fuzz/harness/cram_ref.fa, which the target loads too), in
# CRAM 3.0 and 3.1 with several codecs. Needs pysam (e.g. .venv/bin/python).
import shutil, subprocess, tempfile


def cram_sam(rng):
    seqs, name = {}, None
    for ln in open("fuzz/harness/cram_ref.fa"):
        ln = ln.strip()
        if ln.startswith(">"):
            name = ln[1:]
            seqs[name] = ""
        else:
            seqs[name] += ln
    out = ["@HD\tVN:1.6\tSO:unsorted"] + [f"@SQ\tSN:{n}\tLN:{len(s)}" for n, s in seqs.items()]
    out.append("@RG\tID:g1\tSM:s")
    def qual(n):
        return "".join(chr(33 + rng.randrange(41)) for _ in range(n))
    for i in range(24):
        chrom = rng.choice(list(seqs))
        ref = seqs[chrom]
        pos = rng.randrange(1, len(ref) - 60)
        read = list(ref[pos - 1 : pos + 39])
        read[rng.randrange(40)] = rng.choice("ACGTN")
        kind = i % 6
        if kind == 0:
            cigar, seq = "40M", "".join(read)
        elif kind == 1:
            cigar, seq = "3S37M", "".join(read)
        elif kind == 2:
            cigar, seq = "20M2I18M", "".join(read[:20]) + "TT" + "".join(read[20:38])
        elif kind == 3:
            cigar, seq = "5H18M3D19M", "".join(read[:18] + read[21:40])
        elif kind == 4:
            cigar, seq = "40M", "".join(read).lower()
        else:
            cigar, seq = "10M1N30M", "".join(read)
        flag = rng.choice([0, 16, 256, 2048, 99, 147, 1024])
        tags = f"RG:Z:g1\tXI:i:{i}\tXA:A:q\tXf:f:1.5\tXB:B:s,-1,2,300\tXH:H:1A2B\tXc:i:-3\tXZ:Z:z{i}"
        q = qual(len(seq)) if i % 5 else "*"
        if flag in (99, 147):
            out.append(f"p{i}\t{flag}\t{chrom}\t{pos}\t{rng.randrange(61)}\t{cigar}\t=\t{pos + 100}\t{140 if flag == 99 else -140}\t{seq}\t{q}\t{tags}")
        else:
            out.append(f"r{i}\t{flag}\t{chrom}\t{pos}\t{rng.randrange(61)}\t{cigar}\t*\t0\t0\t{seq}\t{q}\t{tags}")
    # a pair within the container, a read past the reference end, unmapped reads
    out.append(f"m1\t99\tc1\t100\t60\t20M\t=\t150\t70\t{seqs['c1'][99:119]}\t*\tRG:Z:g1")
    out.append(f"m1\t147\tc1\t150\t60\t20M\t=\t100\t-70\t{seqs['c1'][149:169]}\t*\tRG:Z:g1")
    out.append(f"end\t0\tc2\t{len(seqs['c2']) - 9}\t60\t20M\t*\t0\t0\t{'ACGT' * 5}\t*")
    out.append("u1\t4\tc1\t500\t0\t*\t=\t500\t0\tACGTNACGT\t*")
    out.append("u2\t77\t*\t0\t0\t*\t*\t0\t0\tGGGCCC\tIIIIII\tRG:Z:g1")
    out.append("u2\t141\t*\t0\t0\t*\t*\t0\t0\t*\t*")
    return "\n".join(out) + "\n"


try:
    import pysam
except ImportError:
    pysam = None
    print("pysam not found: cram seeds not written", file=sys.stderr)
if pysam is not None:
    tmp = tempfile.mkdtemp()
    ref = os.path.join(tmp, "ref.fa")
    shutil.copy("fuzz/harness/cram_ref.fa", ref)
    sam = os.path.join(tmp, "in.sam")
    with open(sam, "w") as fh:
        fh.write(cram_sam(random.Random(8)))
    for name, opts in [
        ("3.0-default", ["version=3.0"]),
        ("3.0-bzip2-lzma", ["version=3.0", "use_bzip2=1", "use_lzma=1", "seqs_per_slice=10", "slices_per_container=2"]),
        ("3.0-embed-ref", ["version=3.0", "embed_ref=1"]),
        ("3.1-default", ["version=3.1"]),
        ("3.1-archive", ["version=3.1", "use_arith=1", "use_fqz=1", "use_tok=1", "use_bzip2=1"]),
        ("3.1-no-ref-md-nm", ["version=3.1", "no_ref=1", "store_md=1", "store_nm=1"]),
    ]:
        out = os.path.join(tmp, name + ".cram")
        args = []
        for o in opts:
            args += ["--output-fmt-option", o]
        # each samtools call in its own process (pysam keeps global state)
        subprocess.run([sys.executable, "-c", "import pysam,sys; pysam.samtools.view(*sys.argv[1:], catch_stdout=False)",
                        "-C", "-T", ref, *args, "-o", out, sam], check=True)
        with open(out, "rb") as fh:
            put("cram", name, fh.read())
    shutil.rmtree(tmp)
