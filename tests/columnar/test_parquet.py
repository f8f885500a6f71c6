"""`alnsort sort -O parquet`: the dataset read by the tools users have
(pyarrow, DuckDB, Polars) with the counts samtools gives, and read back by
alnsort into BAM records identical to the input's, byte for byte.

The inputs are tests/gen.py's generated traps (every aux type and integer
width, B arrays, unplaced reads, long records) and samtools' own test file
tests/diff/data/samtools_minimiser/mpileup.1.sam.gz. The oracle is samtools
1.24 through pysam: `samtools view -c` on the indexed BAM for the region
counts, and pysam's reading of each record for the field-by-field sample.
"""

from __future__ import annotations

import gzip
import random
import struct
import subprocess
from pathlib import Path

import duckdb
import polars as pl
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pysam
import pytest

import gen
import harness
import oracle

REGION = ("chr1", 1_000_000, 2_000_000)
REAL_SAM = harness.REPO_ROOT / "tests/diff/data/samtools_minimiser/mpileup.1.sam.gz"


def alnsort(*args: str) -> subprocess.CompletedProcess:
    res = subprocess.run(
        [harness.alnsort_path(), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=harness.RUN_TIMEOUT_S
    )
    return res


def ok(*args: str) -> subprocess.CompletedProcess:
    res = alnsort(*args)
    harness.check_ok(res)
    return res


def refused(*args: str) -> str:
    res = alnsort(*args)
    assert res.returncode != 0, f"alnsort {' '.join(args)} succeeded"
    return res.stderr.decode()


def bam_records(path: Path) -> bytes:
    """The uncompressed BAM records of PATH (everything after the header)."""
    data = gzip.decompress(path.read_bytes())
    assert data[:4] == b"BAM\x01"
    (l_text,) = struct.unpack_from("<i", data, 4)
    at = 8 + l_text
    (n_ref,) = struct.unpack_from("<i", data, at)
    at += 4
    for _ in range(n_ref):
        (l_name,) = struct.unpack_from("<i", data, at)
        at += 4 + l_name + 4
    return data[at:]


def count_records(raw: bytes) -> int:
    n, at = 0, 0
    while at < len(raw):
        (size,) = struct.unpack_from("<I", raw, at)
        at += 4 + size
        n += 1
    return n


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("columnar")


@pytest.fixture(scope="module")
def gen_bam(work) -> Path:
    """A coordinate-sorted, indexed BAM of generated traps: region chr1:1-2 Mb
    populated, unplaced reads, long records, every tag type."""
    sam = work / "gen.sam"
    sam.write_text(
        gen.generate(gen.Params(seed=40, n_templates=4000, n_long_reads=2, n_huge_aux=1, tie_fraction=0.3))
    )
    bam = work / "gen.bam"
    oracle.sort([], str(sam), str(bam))
    oracle.index(str(bam), "bai")
    return bam


@pytest.fixture(scope="module")
def real_bam(work) -> Path:
    sam = work / "real.sam"
    sam.write_bytes(gzip.decompress(REAL_SAM.read_bytes()))
    bam = work / "real.bam"
    oracle.sort([], str(sam), str(bam))
    return bam


@pytest.fixture(scope="module")
def gen_ds(work, gen_bam) -> Path:
    ds = work / "gen.parquet"
    ok("sort", "-@", "2", "-O", "parquet", "-o", str(ds), str(gen_bam))
    return ds


def back_to_bam(ds: Path, out: Path, *args: str) -> bytes:
    """The records of DS sorted back into the BAM OUT (`--no-PG`: OUT's
    header is then the dataset's own)."""
    ok("sort", "--no-PG", *args, "-o", str(out), str(ds))
    return bam_records(out)


def test_bam_to_parquet_to_bam_is_identical_record_for_record(work, gen_bam, gen_ds):
    want = bam_records(gen_bam)
    got = back_to_bam(gen_ds, work / "gen.back.bam")
    assert count_records(got) == count_records(want) > 5000
    assert got == want


def test_a_real_file_round_trips(work, real_bam):
    ds = work / "real.parquet"
    ok("sort", "-O", "parquet,codec=snappy", "-o", str(ds), str(real_bam))
    assert back_to_bam(ds, work / "real.back.bam") == bam_records(real_bam)


def test_name_order_round_trips_in_one_folder(work, gen_bam):
    ds = work / "name.parquet"
    ok("sort", "-n", "-O", "parquet", "-o", str(ds), str(gen_bam))
    assert not list(ds.glob("ref=*")), "name order is not partitioned by reference"
    direct = work / "name.bam"
    ok("sort", "-n", "-o", str(direct), str(gen_bam))
    assert back_to_bam(ds, work / "name.back.bam", "-n") == bam_records(direct)


def test_markdup_and_merge_write_and_read_datasets(work, gen_bam, gen_ds):
    ds = work / "md.parquet"
    ok("sort", "--markdup", "-O", "parquet", "-o", str(ds), str(gen_bam))
    direct = work / "md.bam"
    ok("sort", "--markdup", "-o", str(direct), str(gen_bam))
    assert back_to_bam(ds, work / "md.back.bam") == bam_records(direct)
    # merge: two datasets in, as the two BAMs with the datasets' headers
    # (converted back with --no-PG) merged.
    gen_back = work / "gen.back2.bam"
    md_back = work / "md.back2.bam"
    back_to_bam(gen_ds, gen_back)
    back_to_bam(ds, md_back)
    from_bams = work / "merged_bams.bam"
    ok("merge", "-s", "1", "-f", str(from_bams), str(gen_back), str(md_back))
    from_ds = work / "merged_ds.bam"
    ok("merge", "-s", "1", "-f", str(from_ds), str(gen_ds), str(ds))
    assert bam_records(from_ds) == bam_records(from_bams)
    # merge: a dataset out.
    merged_bam = work / "merged.bam"
    ok("merge", "-s", "1", "-f", str(merged_bam), str(gen_bam), str(direct))
    merged_ds = work / "merged.parquet"
    ok("merge", "-s", "1", "-f", "-O", "parquet", "-o", str(merged_ds), str(gen_bam), str(direct))
    assert back_to_bam(merged_ds, work / "merged.back.bam") == bam_records(merged_bam)


def test_layout_and_metadata(gen_ds, gen_bam):
    marker = (gen_ds / "_alnsort_dataset").read_text()
    assert marker.startswith("schema_version 1\n")
    folders = sorted(p.name for p in gen_ds.iterdir() if p.is_dir())
    assert folders == ["ref=__HIVE_DEFAULT_PARTITION__", "ref=chr1", "ref=chr2", "ref=chrM"]
    md = pq.read_metadata(gen_ds / "ref=chr1" / "part-00000.parquet")
    kv = {k.decode(): v.decode() for k, v in md.metadata.items()}
    assert kv["alnsort.schema_version"] == "1"
    assert kv["alnsort.sort_order"] == "coordinate"
    assert "-O parquet" in kv["alnsort.command"]
    with pysam.AlignmentFile(str(gen_bam)) as f:
        header_sq = [l for l in str(f.header).splitlines() if l.startswith("@SQ")]
    assert [l for l in kv["alnsort.header"].splitlines() if l.startswith("@SQ")] == header_sq
    # Row groups with statistics on pos and end, in position order.
    pos_col = md.schema.to_arrow_schema().get_field_index("pos")
    end_col = md.schema.to_arrow_schema().get_field_index("end")
    for i in range(md.num_row_groups):
        assert md.row_group(i).column(pos_col).statistics.has_min_max
        assert md.row_group(i).column(end_col).statistics.has_min_max
    starts = [md.row_group(i).column(pos_col).statistics.min for i in range(md.num_row_groups)]
    assert starts == sorted(starts)


def samtools_count(bam: Path, *region: str) -> int:
    """`samtools view -c BAM [REGION]` (pysam's samtools 1.24)."""
    return int(pysam.view("-c", str(bam), *region).strip())


def test_pyarrow_duckdb_polars_count_rows_and_region(gen_ds, gen_bam):
    chrom, beg, end = REGION
    region = f"{chrom}:{beg}-{end}"
    want_total = samtools_count(gen_bam)
    want_region = samtools_count(gen_bam, region)
    assert want_region > 50, "the region must hold records for the check to mean something"

    ds = pads.dataset(str(gen_ds), format="parquet", partitioning="hive")
    assert ds.count_rows() == want_total
    expr = (pads.field("ref") == chrom) & (pads.field("pos") <= end) & (pads.field("end") >= beg)
    assert ds.count_rows(filter=expr) == want_region
    unmapped = ds.count_rows(filter=pads.field("ref").is_null())
    with pysam.AlignmentFile(str(gen_bam)) as f:
        want_unplaced = sum(1 for r in f.fetch(until_eof=True) if r.reference_id < 0)
    assert unmapped == want_unplaced > 0

    glob = str(gen_ds / "**" / "*.parquet")
    con = duckdb.connect()
    assert con.execute(f"select count(*) from read_parquet('{glob}', hive_partitioning=true)").fetchone()[0] == want_total
    got = con.execute(
        f"select count(*) from read_parquet('{glob}', hive_partitioning=true) "
        f"where ref = ? and pos <= ? and \"end\" >= ?",
        [chrom, end, beg],
    ).fetchone()[0]
    assert got == want_region

    lf = pl.scan_parquet(glob, hive_partitioning=True)
    assert lf.select(pl.len()).collect().item() == want_total
    got = lf.filter((pl.col("rname") == chrom) & (pl.col("pos") <= end) & (pl.col("end") >= beg)).select(pl.len())
    assert got.collect().item() == want_region


def test_a_sample_of_rows_field_by_field_against_pysam(gen_ds, gen_bam):
    table = pads.dataset(str(gen_ds), format="parquet", partitioning="hive").to_table()
    rows = table.to_pylist()
    with pysam.AlignmentFile(str(gen_bam)) as f:
        recs = list(f.fetch(until_eof=True))
    assert len(rows) == len(recs)
    # The dataset's order is the BAM's: folders in reference order, the
    # unmapped last; pyarrow lists the folders by name, so key rows by
    # (name, flag, pos, seq) instead.
    by_key: dict = {}
    for r in rows:
        by_key.setdefault((r["qname"], r["flag"], r["pos"]), []).append(r)
    rng = random.Random(7)
    for rec in rng.sample(recs, 300):
        cands = by_key[(rec.query_name, rec.flag, rec.reference_start + 1)]
        row = next(c for c in cands if c["cigar"] == (rec.cigarstring or None) and c["tlen"] == rec.template_length)
        assert row["rname"] == (rec.reference_name if rec.reference_id >= 0 else None)
        assert row["ref"] == row["rname"]
        assert row["mapq"] == rec.mapping_quality
        assert row["rnext"] == (rec.next_reference_name if rec.next_reference_id >= 0 else None)
        assert row["pnext"] == rec.next_reference_start + 1
        assert row["end"] == (rec.reference_end if rec.reference_end is not None and not rec.is_unmapped else rec.reference_start + 1)
        assert row["seq"] == rec.query_sequence
        if rec.query_qualities is None:
            assert row["qual"] is None
        else:
            assert list(row["qual"]) == list(rec.query_qualities)
        # Tags: order and types as pysam reads them; standard ones in their column.
        tags = rec.get_tags(with_value_type=True)
        assert [e["tag"] for e in row["tags"]] == [t for t, _, _ in tags]
        for entry, (tag, value, ty) in zip(row["tags"], tags):
            column = f"tag_{tag}"
            if entry["value"] is None:
                assert row[column] == value, (tag, row[column], value)
            elif ty == "Z":
                assert entry["value"].decode() == value
            elif ty in "cCsSiI":
                assert entry["type"] == ty
                # pysam reads an I beyond 2^31 as a negative int32.
                want = value % 2**32 if ty == "I" else value
                assert int.from_bytes(entry["value"], "little", signed=ty.islower()) == want


def test_datasets_alnsort_did_not_write_are_refused_by_what_they_lack(work):
    plain = work / "plain"
    plain.mkdir()
    err = refused("sort", "-o", str(work / "x.bam"), str(plain))
    assert "no _alnsort_dataset file" in err, err
    import pyarrow as pa

    other = work / "other"
    other.mkdir()
    (other / "_alnsort_dataset").write_text("schema_version 1\nfiles 1\nrecords 1\n")
    pq.write_table(pa.table({"qname": ["a"], "pos": pa.array([1], pa.int64())}), other / "part-00000.parquet")
    err = refused("sort", "-o", str(work / "x.bam"), str(other))
    for want in ['metadata key "alnsort.header"', 'column "flag"', 'column "pos" of type Int32 (found Int64)', 'column "tags"']:
        assert want in err, err
    assert not (work / "x.bam").exists()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--write-index"], "--write-index cannot be honoured for Parquet output"),
        (["-l", "5"], "-l sets the BAM/BGZF deflate level"),
        (["-u"], "-u (uncompressed BAM) cannot be honoured"),
        (["-O", "parquet,codec=lz4"], "the codecs are zstd and snappy"),
    ],
)
def test_options_a_dataset_cannot_honour_are_refused(work, gen_bam, args, said):
    out = work / "refused.parquet"
    err = refused("sort", "-O", "parquet", *args, "-o", str(out), str(gen_bam))
    assert said in err, err
    assert not out.exists()


def test_standard_output_and_an_occupied_directory_are_refused(work, gen_bam):
    assert "give it with -o DIR" in refused("sort", "-O", "parquet", str(gen_bam))
    occupied = work / "occupied"
    occupied.mkdir()
    (occupied / "keep.txt").write_text("mine")
    err = refused("sort", "-O", "parquet", "-o", str(occupied), str(gen_bam))
    assert "is not a dataset alnsort wrote; not replaced" in err, err
    assert (occupied / "keep.txt").read_text() == "mine"
    assert [p.name for p in work.iterdir() if "alnsort-tmp" in p.name] == []


def test_python_sort_writes_the_same_dataset(work, gen_bam, gen_ds):
    import alnsort

    ds = work / "py.parquet"
    alnsort.sort(str(gen_bam), str(ds), output_format="parquet", threads=2)
    assert back_to_bam(ds, work / "py.back.bam") == bam_records(gen_bam)
