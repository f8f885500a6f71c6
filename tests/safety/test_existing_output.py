"""A failed run never touches what was already at its destination (issue 8,
item 1). Before this was fixed, every error removed any regular file at the
`-o` path and at the index path: `cp st.bam important.bam; alnsort sort -o
important.bam missing.bam` lost important.bam (and its .csi). The output and
the index are written under temporary names and renamed into place only at
the very end, so a failed run has nothing of its own at the destination and
must leave the old files byte-for-byte as they were, with no debris beside
them or under -T.

Every kind of failure is tried, with the index in both forms (`--write-index`
giving out.bam.csi, and `-o out.bam##idx##out.bam.bai`): input that is not
SAM/BAM, a missing input, a memory budget too small to run, a truncated BAM,
SIGINT/SIGTERM mid-run, EFBIG while writing the output (RLIMIT_FSIZE, as in
test_nospace) and ENOSPC on a full filesystem (a small tmpfs; skipped, with
the reason, where mounting is not permitted).
"""

from __future__ import annotations

import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest

import safety_util as u

OLD_OUTPUT = u.bam_file(u.bam_header(), u.records(7, seed=99))
OLD_INDEX = b"an index from an earlier run\n"
# 25 MB of SAM: with -m 1M the run spills for a while before writing, and
# its BAM output (~10 MB) crosses a 4 MiB file-size limit.
BIG_BYTES = 25_000_000


@pytest.fixture(scope="module")
def big_input(tmp_path_factory) -> Path:
    return u.big_sam(tmp_path_factory.mktemp("existing_in") / "big.sam", BIG_BYTES, seed=41)


INDEX_FORMS = {
    "csi": (lambda out: ["--write-index", "-o", str(out)], ".csi"),
    "bai": (lambda out: ["--write-index", "-o", f"{out}##idx##{out}.bai"], ".bai"),
}


def place_old_files(outdir: Path, form: str) -> tuple[Path, dict[str, bytes]]:
    out = outdir / "important.bam"
    out.write_bytes(OLD_OUTPUT)
    idx = Path(str(out) + INDEX_FORMS[form][1])
    idx.write_bytes(OLD_INDEX)
    return out, {out.name: OLD_OUTPUT, idx.name: OLD_INDEX}


def assert_untouched(outdir: Path, tdir: Path, before: dict[str, bytes], ctx: str) -> None:
    now = {p.name: p.read_bytes() for p in outdir.iterdir()}
    assert sorted(now) == sorted(before), f"files beside the output changed: {sorted(now)}\n{ctx}"
    for name, data in before.items():
        assert now[name] == data, f"{name} was altered by the failed run\n{ctx}"
    assert u.entries(tdir) == [], f"debris under -T: {u.entries(tdir)}\n{ctx}"


def _bad_inputs(d: Path) -> dict[str, Path]:
    good = u.bam_file(u.bam_header(), u.records(2000))
    not_sam = d / "notes.txt"
    not_sam.write_text("this is not a SAM file\nat all\n")
    truncated = d / "truncated.bam"
    truncated.write_bytes(good[: len(good) // 2])
    small = d / "small.bam"
    small.write_bytes(good)
    return {"not_sam": not_sam, "missing": d / "missing.bam", "truncated": truncated, "small": small}


# (input name, extra options, pattern expected on stderr)
QUICK_FAILURES = {
    "not_sam": ("not_sam", [], r"notes\.txt"),
    "missing": ("missing", [], r"missing\.bam"),
    "budget_too_small": ("small", ["--max-memory", "1K"], r"--max-memory .* is too small"),
    "truncated_bam": ("truncated", [], r"truncated\.bam"),
}


@pytest.mark.parametrize("form", list(INDEX_FORMS))
@pytest.mark.parametrize("failure", list(QUICK_FAILURES))
def test_failed_run_keeps_existing_output_and_index(failure: str, form: str, tmp_path: Path):
    import re

    name, extra, pattern = QUICK_FAILURES[failure]
    inputs = _bad_inputs(tmp_path)
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out, before = place_old_files(outdir, form)
    res = u.run([*extra, "-T", str(tdir), *INDEX_FORMS[form][0](out), str(inputs[name])])
    err = res.stderr.decode("utf-8", "replace")
    ctx = f"{failure} ({form}): exit {res.returncode}; stderr:\n{err}"
    assert res.returncode == 1, ctx
    assert re.search(pattern, err), f"expected /{pattern}/\n{ctx}"
    assert_untouched(outdir, tdir, before, ctx)


@pytest.mark.parametrize("phase", ["spill", "merge"])
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_signal_keeps_existing_output_and_index(signame: str, phase: str, big_input: Path, tmp_path: Path):
    sig = getattr(signal, signame)
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out, before = place_old_files(outdir, "csi")
    log = tmp_path / "stderr"
    with open(log, "wb") as err:
        proc = subprocess.Popen([u.alnsort_bin(), "sort", "-m", "1M", "-T", str(tdir), *INDEX_FORMS["csi"][0](out),
                                 str(big_input)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=u.default_signals)
    try:
        deadline = time.monotonic() + 60

        def reached() -> bool:
            if phase == "spill":
                return sum(1 for p in tdir.rglob("*") if p.is_file()) >= 2
            p = u.pending_outputs(outdir)
            return bool(p) and (outdir / p[0]).stat().st_size > 500_000

        while not reached():
            assert proc.poll() is None, f"alnsort ended ({proc.returncode}) before the {phase} phase was seen"
            assert time.monotonic() < deadline, f"{phase} phase not seen within 60 s"
            time.sleep(0.002)
        proc.send_signal(sig)
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ctx = f"{signame} during {phase}: exit {rc}; stderr:\n{log.read_text(errors='replace')}"
    assert rc == 128 + sig, ctx
    assert_untouched(outdir, tdir, before, ctx)


@pytest.mark.parametrize("form", list(INDEX_FORMS))
def test_efbig_keeps_existing_output_and_index(form: str, big_input: Path, tmp_path: Path):
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    out, before = place_old_files(outdir, form)
    limit = 4 << 20

    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    res = u.run(["-m", "2M", "-T", str(tdir), *INDEX_FORMS[form][0](out), str(big_input)], preexec_fn=pre)
    err = res.stderr.decode("utf-8", "replace")
    ctx = f"exit {res.returncode}; stderr:\n{err}"
    assert res.returncode == 1 and "File too large" in err, ctx
    assert_untouched(outdir, tdir, before, ctx)


def test_full_filesystem_keeps_existing_output_and_index(big_input: Path, tmp_path: Path):
    """The old output and index sit on a 5 MiB tmpfs; the new output does
    not fit there (ENOSPC while writing it)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    tdir = tmp_path / "T"
    tdir.mkdir()
    with u.mounted_tmpfs(mnt, "size=5m") as why_not:
        if why_not:
            pytest.skip(f"cannot mount a tmpfs for the full-filesystem case: {why_not}")
        out, before = place_old_files(mnt, "csi")
        res = u.run(["-m", "2M", "-T", str(tdir), *INDEX_FORMS["csi"][0](out), str(big_input)])
        err = res.stderr.decode("utf-8", "replace")
        ctx = f"exit {res.returncode}; stderr:\n{err}"
        assert res.returncode == 1 and "No space left on device" in err, ctx
        assert_untouched(mnt, tdir, before, ctx)
        used = int(subprocess.run(["du", "-sk", str(mnt)], capture_output=True, text=True).stdout.split()[0])
        assert used <= 8, f"space not given back on the full filesystem: {used} KiB used\n{ctx}"
