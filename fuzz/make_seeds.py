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
