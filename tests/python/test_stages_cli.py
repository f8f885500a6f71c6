"""The distributed sort's stages as `alnsort` subcommands (split, sample,
splitters, map, reduce, assemble), driven as a workflow manager would:
JSON on standard output, blocks and parts as files. The assembled output
holds `alnsort sort`'s records (equal uncompressed streams) with a merged
index equal to `samtools index`'s content, and bad arguments fail with a
message and no output."""

from __future__ import annotations

import gzip
import json
import subprocess
from pathlib import Path

import pysam

import harness


def stage(alnsort_bin: str, *argv: str) -> dict | list:
    res = subprocess.run([alnsort_bin, *argv], capture_output=True, text=True, timeout=600)
    harness.check_ok(res)
    return json.loads(res.stdout)


def inflated(path) -> bytes:
    with gzip.open(path, "rb") as f:
        return f.read()


def test_subcommands_sort_like_alnsort_sort(alnsort_bin, inputs, tmp_path):
    inp = inputs.bam("main")
    order = ["--template-coordinate"]
    want = tmp_path / "want.bam"
    harness.check_ok(subprocess.run(
        [alnsort_bin, "sort", "--no-PG", *order, "-o", str(want), inp],
        capture_output=True, text=True, timeout=600))
    sort_opts = ["--", "--no-PG", *order]
    splits = stage(alnsort_bin, "split", "--parts", "3", inp)
    assert [s["ordinal"] for s in splits] == [0, 1, 2]
    sample_files = []
    for s in splits:
        got = stage(alnsort_bin, "sample", "--split", s["arg"], "--count", "50", inp, *sort_opts)
        assert 0 < len(got["samples"]) <= 50
        f = tmp_path / f"samples-{s['ordinal']}.json"
        f.write_text(json.dumps(got))
        sample_files.append(str(f))
    cuts = stage(alnsort_bin, "splitters", "--partitions", "3", *sample_files)
    assert len(cuts["splitters"]) == 2
    cuts_file = tmp_path / "splitters.json"
    cuts_file.write_text(json.dumps(cuts))
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    maps = [
        stage(alnsort_bin, "map", "--split", s["arg"], "--splitters", str(cuts_file),
              "--out-dir", str(blocks), inp, *sort_opts)
        for s in splits
    ]
    for i in range(len(splits) - 1):
        assert maps[i]["end"] == splits[i + 1]["start"], "a proven end meets the next start"
    assert maps[-1]["end"] is None
    out = reduce_and_assemble(alnsort_bin, maps, 3, [inp], sort_opts, tmp_path)
    assert inflated(out) == inflated(want)


def reduce_and_assemble(alnsort_bin: str, maps: list, ranges: int, paths: list[str],
                        sort_opts: list[str], tmp_path: Path) -> Path:
    """`alnsort reduce` of every range (the maps' blocks in split order),
    then `alnsort assemble` of the parts into tmp_path/out.bam."""
    parts = []
    for r in range(ranges):
        part = tmp_path / f"part-{r}"
        args = ["reduce", "--range", str(r), "--partitions", str(ranges), "--part", str(part)]
        for m in maps:
            args += ["--block", m["blocks"][r]]
        got = stage(alnsort_bin, *args, *paths, *sort_opts)
        assert got["bytes"] == part.stat().st_size
        parts.append(str(part))
    out = tmp_path / "out.bam"
    args = ["assemble", "--output", str(out)]
    for p in parts:
        args += ["--part", p]
    done = stage(alnsort_bin, *args, *paths, *sort_opts)
    assert done["bytes"] == out.stat().st_size
    return out


def test_indexed_assembly_and_errors(alnsort_bin, inputs, tmp_path):
    inp = inputs.bam("main")
    splits = stage(alnsort_bin, "split", "--parts", "2", inp)
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    maps = [stage(alnsort_bin, "map", "--split", s["arg"], "--out-dir", str(blocks), inp)
            for s in splits]
    part = tmp_path / "part-0"
    stage(alnsort_bin, "reduce", "--range", "0", "--part", str(part), "--index",
          *[a for m in maps for a in ("--block", m["blocks"][0])], inp)
    assert Path(f"{part}.idx").exists()
    out = tmp_path / "out.bam"
    done = stage(alnsort_bin, "assemble", "--output", str(out), "--part", str(part),
                 "--write-index", "bai", inp, "--", "--no-PG")
    assert done["index"] == f"{out}.bai"
    theirs = tmp_path / "theirs.bai"
    pysam.index("-b", str(out), str(theirs))
    with pysam.AlignmentFile(str(out), index_filename=done["index"]) as a, \
            pysam.AlignmentFile(str(out), index_filename=str(theirs)) as b:
        for ref, length in zip(a.references, a.lengths):
            for beg in range(0, length, length // 25):
                assert [r.to_string() for r in a.fetch(ref, beg, beg + 5000)] == \
                    [r.to_string() for r in b.fetch(ref, beg, beg + 5000)]

    # Errors: a message naming the problem, exit 1 or 2, nothing written.
    res = subprocess.run([alnsort_bin, "map", "-n", inp], capture_output=True, text=True)
    assert res.returncode == 2 and "sort options go after --" in res.stderr
    bad = tmp_path / "bad.bam"
    bad.write_bytes(b"not a bam file at all, not even gzip")
    res = subprocess.run([alnsort_bin, "split", "--parts", "2", str(bad)],
                         capture_output=True, text=True)
    assert res.returncode == 1 and "not a BAM file" in res.stderr and res.stdout == ""
    corrupt = tmp_path / "corrupt.alnblk"
    data = bytearray(Path(maps[0]["blocks"][0]).read_bytes())
    data[len(data) // 2] ^= 0x55
    corrupt.write_bytes(bytes(data))
    part2 = tmp_path / "part-x"
    res = subprocess.run([alnsort_bin, "reduce", "--range", "0", "--part", str(part2),
                          "--block", str(corrupt), inp], capture_output=True, text=True)
    assert res.returncode == 1 and "corrupt" in res.stderr, res.stderr
    assert not part2.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_subcommands_sort_lanes_with_other_headers(alnsort_bin, tmp_path):
    """Two lanes whose headers must be merged (other @SQ order, a reference
    only one has, clashing @RG/@PG IDs), -n: `alnsort reach` of every split
    and `map --prior` (the largest reach of the earlier splits of the same
    input) give the file `alnsort sort -n IN1 IN2` writes."""
    import lanes

    paths = lanes.make_lanes(tmp_path, seed=5, n_templates=1500)[1:]
    want = tmp_path / "want.bam"
    harness.check_ok(subprocess.run(
        [alnsort_bin, "sort", "--no-PG", "-n", "-o", str(want), *paths],
        capture_output=True, text=True, timeout=600))
    sort_opts = ["--", "--no-PG", "-n"]
    splits = stage(alnsort_bin, "split", "--parts", "4", *paths)
    assert {s["input"] for s in splits} == {0, 1} and len(splits) >= 4
    sample_files = []
    reaches = []
    for s in splits:
        got = stage(alnsort_bin, "sample", "--split", s["arg"], "--count", "50", *paths, *sort_opts)
        f = tmp_path / f"samples-{s['ordinal']}.json"
        f.write_text(json.dumps(got))
        sample_files.append(str(f))
        reaches.append(stage(alnsort_bin, "reach", "--split", s["arg"], *paths)["reach"])
    assert all(isinstance(r, int) for r in reaches), reaches
    cuts_file = tmp_path / "splitters.json"
    cuts_file.write_text(json.dumps(stage(alnsort_bin, "splitters", "--partitions", "2", *sample_files)))
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    maps = []
    for i, s in enumerate(splits):
        earlier = [reaches[j] for j in range(i) if splits[j]["input"] == s["input"]]
        prior = ["--prior", str(max(earlier))] if earlier else []
        m = stage(alnsort_bin, "map", "--split", s["arg"], "--splitters", str(cuts_file), *prior,
                  "--out-dir", str(blocks), *paths, *sort_opts)
        assert m["reach"] == reaches[i], "a map's reach is the split's"
        maps.append(m)
    out = reduce_and_assemble(alnsort_bin, maps, 2, paths, sort_opts, tmp_path)
    assert inflated(out) == inflated(want)


def test_sort_options_no_stage_reads_are_refused(alnsort_bin, inputs, tmp_path):
    """A sort option that no stage reads (run statistics, MultiQC, progress,
    verbosity, a CRAM reference) is refused by name by every stage, split
    included, never ignored; the options the stages honour are taken."""
    inp = inputs.bam("main")
    splits = stage(alnsort_bin, "split", "--parts", "2", inp)
    arg = splits[0]["arg"]
    refused = {
        "--stats-json": [str(tmp_path / "s.json")],
        "--mqc": [str(tmp_path / "s_mqc.json")],
        "--progress": [],
        "--progress-interval": ["5"],
        "--verbosity": ["3"],
        "--reference": [str(tmp_path / "ref.fa")],
    }
    for opt, value in refused.items():
        for argv in (["split", "--parts", "2", inp], ["sample", "--split", arg, inp],
                     ["map", "--split", arg, "--out-dir", str(tmp_path), inp]):
            res = subprocess.run([alnsort_bin, *argv, "--", opt, *value], capture_output=True, text=True)
            assert res.returncode != 0 and f"{opt} is not supported" in res.stderr, (argv[0], opt, res.stderr)
            assert res.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # Honoured (or, for --no-progress, already so): taken.
    assert stage(alnsort_bin, "split", "--parts", "2", inp, "--", "-n", "--no-progress", "-l", "1") == splits
    assert stage(alnsort_bin, "sample", "--split", arg, inp, "--", "--no-progress", "-m", "100M")["samples"]


def test_configuration_warnings_come_from_the_assemble_as_alnsort_sort_gives_them(alnsort_bin, inputs, tmp_path):
    """An index asked of a name-sorted output: `alnsort sort -n
    --write-index` warns that it is ignored and writes none. Through the
    stage subcommands the assemble, which decides the index, gives the same
    warning once (asked with its own --write-index or among the sort
    options), writes no index, and the stages before it print nothing."""
    inp = inputs.bam("main")
    res = subprocess.run([alnsort_bin, "sort", "-n", "--write-index", "-o", str(tmp_path / "want.bam"), inp],
                         capture_output=True, text=True, timeout=600)
    harness.check_ok(res)
    warning = "[W::alnsort] Ignoring --write-index as it only works for position sorted files"
    assert res.stderr.splitlines() == [warning], res.stderr
    assert not (tmp_path / "want.bam.csi").exists()

    def quiet(*argv: str) -> dict | list:
        res = subprocess.run([alnsort_bin, *argv], capture_output=True, text=True, timeout=600)
        harness.check_ok(res)
        assert res.stderr == "", (argv[0], res.stderr)
        return json.loads(res.stdout)

    sort_opts = ["--", "-n", "--write-index"]
    (split,) = quiet("split", "--parts", "1", inp, *sort_opts)
    blocks = tmp_path / "blocks"
    blocks.mkdir()
    m = quiet("map", "--split", split["arg"], "--out-dir", str(blocks), inp, *sort_opts)
    part = tmp_path / "part-0"
    quiet("reduce", "--range", "0", "--part", str(part), "--index", "--block", m["blocks"][0], inp, *sort_opts)
    for i, (stage_opts, opts) in enumerate([(["--write-index", "csi"], ["--", "-n"]),
                                             (["--write-index", "bai"], ["--", "-n"]),
                                             ([], sort_opts)]):
        out = tmp_path / f"out{i}.bam"
        res = subprocess.run([alnsort_bin, "assemble", "--output", str(out), "--part", str(part), *stage_opts,
                              inp, *opts], capture_output=True, text=True, timeout=600)
        harness.check_ok(res)
        assert res.stderr.splitlines() == [warning], (stage_opts, res.stderr)
        assert json.loads(res.stdout)["index"] is None
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(f"out{i}")) == [out.name]
