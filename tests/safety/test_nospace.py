"""Running out of space fails cleanly (issue 3, "Temp files" and "Output"):
ENOSPC or EFBIG at any write is a clear error with exit status 1, never a
panic and never a short file that looks finished; a spill that cannot fit in
the temp filesystem is refused up front with a message naming the directory
and the bytes needed (and a sort whose inputs' sizes promise more run files
than the filesystem holds, before reading, issue 38); a full device on stdout exits 1 with a message, and a
closed stdout pipe ends the run quietly by SIGPIPE, as Unix filters do.

How the conditions are made:
* EFBIG: RLIMIT_FSIZE in the child (with SIGXFSZ ignored, so the write
  returns EFBIG instead of killing the process), small enough that either
  the output or the first run file crosses it.
* ENOSPC on stdout: stdout is /dev/full.
* A closed pipe: `alnsort sort ... | head -c 100`.
* A small filesystem: a 5 MiB tmpfs mounted on a test directory. That needs
  CAP_SYS_ADMIN: as root `mount -t tmpfs` works (it does on the development
  machine); otherwise the test retries inside `unshare --user --map-root-user
  --mount`, and if neither is permitted it is skipped with that reason (the
  RLIMIT_FSIZE tests above still cover the write errors).
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

import safety_util as u

# Sorted BAM output of this input is ~10 MB; with `-m 2M` its run files are
# ~1.5 MB each (no fan-in), so a 4 MiB file-size limit is crossed by the
# output and never by a run file.
INPUT_BYTES = 25_000_000
OUTPUT_FSIZE = 4 << 20
# With -m 8M (samtools' meaning: an 8 MiB record buffer, whatever alnsort
# reserves for I/O) the first spill is a run of at least one sub-batch (an
# eighth of the chunk, ~1 MiB of records, ~300 KB compressed, when the
# schedule spills in its smallest shares): a 128 KiB limit is crossed while
# spilling, long before the output holds more than its header.
SPILL_FSIZE = 128 << 10


@pytest.fixture(scope="module")
def sam_input(tmp_path_factory) -> Path:
    return u.big_sam(tmp_path_factory.mktemp("nospace_in") / "in.sam", INPUT_BYTES, seed=31)


def fsize_limit(limit: int):
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return pre


def dirs(tmp_path: Path) -> tuple[Path, Path]:
    tdir, outdir = tmp_path / "T", tmp_path / "out"
    tdir.mkdir()
    outdir.mkdir()
    return tdir, outdir


def assert_clean_failure(res, pattern: str, tdir: Path, outdir: Path | None) -> str:
    err = res.stderr.decode("utf-8", "replace")
    ctx = f"exit {res.returncode}; stderr:\n{err}"
    assert res.returncode == 1, ctx
    assert "panicked" not in err, ctx
    assert re.search(pattern, err), f"expected /{pattern}/\n{ctx}"
    assert u.entries(tdir) == [], f"debris in -T: {u.entries(tdir)}\n{ctx}"
    if outdir is not None:
        assert u.entries(outdir) == [], f"output or temp output left: {u.entries(outdir)}\n{ctx}"
    return err


@pytest.mark.parametrize("fmt", ["BAM", "SAM"])
def test_efbig_while_writing_output(fmt: str, sam_input: Path, tmp_path: Path):
    tdir, outdir = dirs(tmp_path)
    out = outdir / f"sorted.{fmt.lower()}"
    extra = ["--write-index"] if fmt == "BAM" else []
    res = u.run(["-m", "2M", "-O", fmt, *extra, "-T", str(tdir), "-o", str(out), str(sam_input)],
                preexec_fn=fsize_limit(OUTPUT_FSIZE))
    assert_clean_failure(res, rf"writing {re.escape(str(out))}: .*File too large", tdir, outdir)


def test_efbig_while_spilling(sam_input: Path, tmp_path: Path):
    tdir, outdir = dirs(tmp_path)
    out = outdir / "sorted.bam"
    res = u.run(["-m", "8M", "-T", str(tdir), "-o", str(out), str(sam_input)],
                preexec_fn=fsize_limit(SPILL_FSIZE))
    err = assert_clean_failure(res, r"cannot write run file .*/alnsort\.\w+/\S+ at byte offset \d+: File too large",
                               tdir, outdir)
    assert re.search(r"record \d+", err), err


@pytest.mark.parametrize("fmt", ["BAM", "SAM"])
def test_stdout_on_full_device(fmt: str, sam_input: Path, tmp_path: Path):
    tdir = tmp_path / "T"
    tdir.mkdir()
    with open("/dev/full", "wb") as full:
        res = subprocess.run([u.alnsort_bin(), "sort", "-m", "2M", "-O", fmt, "-T", str(tdir), str(sam_input)],
                             stdin=subprocess.DEVNULL, stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert_clean_failure(res, r"writing standard output: .*No space left on device", tdir, None)


@pytest.mark.parametrize("fmt", ["BAM", "SAM"])
def test_closed_stdout_pipe_ends_by_sigpipe(fmt: str, sam_input: Path, tmp_path: Path):
    """`alnsort sort in | head -c 100`: the reader goes away after 100 bytes.
    As with samtools and other Unix filters, the run ends quietly by SIGPIPE
    (shell status 141): no message, never a success status, no debris."""
    tdir = tmp_path / "T"
    tdir.mkdir()
    proc = subprocess.Popen([u.alnsort_bin(), "sort", "-m", "2M", "-O", fmt, "-T", str(tdir), str(sam_input)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = proc.stdout.read(100)
    proc.stdout.close()
    err = proc.stderr.read().decode("utf-8", "replace")
    rc = proc.wait(timeout=120)
    assert len(head) == 100
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == -signal.SIGPIPE, ctx
    assert err == "", ctx
    assert u.entries(tdir) == [], f"debris in -T: {u.entries(tdir)}\n{ctx}"


def test_closed_stdout_pipe_in_a_shell_pipeline(sam_input: Path, tmp_path: Path):
    """`alnsort sort -O sam x | head -2` in bash: two lines out, nothing on
    stderr, and alnsort's status in PIPESTATUS is 141 (128 + SIGPIPE)."""
    tdir = tmp_path / "T"
    tdir.mkdir()
    script = f'"$ALNSORT" sort -O sam -T {tdir} {sam_input} 2>"$ERR" | head -2; echo "STATUS=${{PIPESTATUS[0]}}"'
    errf = tmp_path / "stderr"
    r = subprocess.run(["bash", "-c", script], capture_output=True, timeout=120,
                       env=dict(os.environ, ALNSORT=u.alnsort_bin(), ERR=str(errf)))
    out = r.stdout.decode()
    err = errf.read_text(errors="replace")
    assert out.count("\n") == 3 and out.startswith("@HD"), out
    assert "STATUS=141" in out, f"{out}\nstderr:\n{err}"
    assert err == "", err
    assert u.entries(tdir) == []


# ---- a small filesystem ---------------------------------------------------------------

TMPFS_SIZE = "5m"


def _in_small_fs(tmp_path: Path, script: str) -> subprocess.CompletedProcess | None:
    """Runs SCRIPT (bash, with $MNT a 5 MiB tmpfs) and returns its result, or
    None when no way to mount is permitted. As root the mount is direct;
    otherwise a user+mount namespace is tried."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    env = dict(os.environ, MNT=str(mnt), ALNSORT=u.alnsort_bin())
    with u.mounted_tmpfs(mnt, f"size={TMPFS_SIZE}") as why_not:
        if why_not is None:
            return subprocess.run(["bash", "-c", script], capture_output=True, env=env, timeout=120)
    if shutil.which("unshare") is None:
        return None
    wrapped = f"mount -t tmpfs -o size={TMPFS_SIZE} tmpfs \"$MNT\" || exit 99\n{script}"
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "bash", "-c", wrapped],
                       capture_output=True, env=env, timeout=120)
    return None if r.returncode == 99 or b"unshare failed" in r.stderr else r


# The script prints alnsort's stderr and status, then what is left on the
# small filesystem and beside the output, so the test sees the state before
# the mount goes away.
_REPORT = 'rc=$?; echo "RC=$rc"; echo "LEFT_MNT=$(find "$MNT" -mindepth 1 | tr "\\n" " ")"; ' \
          'echo "USED_KB=$(du -sk "$MNT" | cut -f1)"'


def _parse(r: subprocess.CompletedProcess) -> tuple[int, str, str, str]:
    out = r.stdout.decode()
    rc = int(re.search(r"RC=(\d+)", out).group(1))
    left = re.search(r"LEFT_MNT=(.*)", out).group(1).strip()
    used = re.search(r"USED_KB=(\d+)", out).group(1)
    return rc, left, used, r.stderr.decode("utf-8", "replace")


def _sort_with_small_temp(sam_input: Path, tmp_path: Path, mem: str, *extra: str):
    """Sorts with -m MEM and -T on the 5 MiB filesystem, the output in its own
    directory; returns that directory and the parsed report. The spill-time
    checks are reached with EXTRA `--no-tmp-space-check` (the input's size
    alone already says it cannot fit)."""
    outdir = tmp_path / "out"
    outdir.mkdir()
    out = outdir / "sorted.bam"
    opts = " ".join(extra)
    r = _in_small_fs(tmp_path, f'"$ALNSORT" sort -m {mem} {opts} -T "$MNT" -o {out} {sam_input}; {_REPORT}')
    if r is None:
        pytest.skip("mounting a tmpfs is not permitted here (neither as root nor in a user namespace)")
    return outdir, _parse(r)


def test_spill_that_cannot_fit_is_refused(sam_input: Path, tmp_path: Path):
    """-T on a 5 MiB filesystem and a 16 MiB sort buffer: the first spill
    cannot fit, and alnsort says so before writing it."""
    outdir, (rc, left, _, err) = _sort_with_small_temp(sam_input, tmp_path, "16M", "--no-tmp-space-check")
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    m = re.search(r"not enough space in temp directory (\S+): the next run file may need (\d+) bytes, "
                  r"only (\d+) are free", err)
    assert m, ctx
    assert m.group(1).startswith(str(tmp_path / "small")), ctx
    assert int(m.group(2)) > int(m.group(3)), ctx
    assert left == "", f"debris on the small filesystem: {left}\n{ctx}"
    assert u.entries(outdir) == [], ctx


def test_spills_that_fill_the_filesystem_are_refused(sam_input: Path, tmp_path: Path):
    """Small runs (-m 1M) fit one by one until the filesystem is full: the
    check before a spill (or the ENOSPC of the write) stops the run cleanly."""
    outdir, (rc, left, used, err) = _sort_with_small_temp(sam_input, tmp_path, "1M", "--no-tmp-space-check")
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    assert re.search(r"not enough space in temp directory|No space left on device", err), ctx
    assert left == "" and used == "0", f"debris on the small filesystem: {left!r} ({used} KB)\n{ctx}"
    assert u.entries(outdir) == [], ctx


def test_preflight_refuses_a_sort_the_temp_filesystem_cannot_hold(sam_input: Path, tmp_path: Path):
    """The 25 MB SAM input promises ~9 MB of run files at -m 1M: refused before
    any input is read, naming the directory, what the sort needs and what the
    filesystem has; nothing written anywhere (issue 38)."""
    outdir, (rc, left, used, err) = _sort_with_small_temp(sam_input, tmp_path, "1M")
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    m = re.search(r"not enough temporary space in (\S+): this sort needs about ([\d.]+ \w+) there .* "
                  r"the filesystem has ([\d.]+ \w+) free; .*--no-tmp-space-check", err)
    assert m, ctx
    assert m.group(1).startswith(str(tmp_path / "small")), ctx
    assert left == "" and used == "0", f"debris on the small filesystem: {left!r} ({used} KB)\n{ctx}"
    assert u.entries(outdir) == [], ctx


def test_output_on_full_filesystem(sam_input: Path, tmp_path: Path):
    """-o on the 5 MiB filesystem: ENOSPC while writing the output; the
    pending output is removed (the space comes back) and no output appears."""
    tdir = tmp_path / "T"
    tdir.mkdir()
    r = _in_small_fs(tmp_path, f'"$ALNSORT" sort -m 2M --write-index -T {tdir} -o "$MNT/sorted.bam" {sam_input}; '
                               f'{_REPORT}')
    if r is None:
        pytest.skip("mounting a tmpfs is not permitted here (neither as root nor in a user namespace)")
    rc, left, used, err = _parse(r)
    ctx = f"exit {rc}; stderr:\n{err}"
    assert rc == 1, ctx
    assert re.search(r"writing \S+/sorted\.bam: .*No space left on device", err), ctx
    assert left == "" and used == "0", f"left on the full filesystem: {left!r} ({used} KB)\n{ctx}"
    assert u.entries(tdir) == [], ctx
