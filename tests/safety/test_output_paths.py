"""Where `-o` points (issue 3, "Output"): a file is written under a temporary
name and renamed into place, but a destination that is not a regular file
must be written in place, never replaced: before this was fixed,
`-o /dev/null` (or a symlink to it) renamed a regular file over the device
node, which as root destroys /dev/null for the whole machine, and `-o FIFO`
replaced the pipe its reader was waiting on. A failed run never touches
what is at the output path: a device, a pipe, the input itself, or an
earlier output (test_existing_output.py).
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import safety_util as u


def good_bam(tmp_path: Path) -> Path:
    p = tmp_path / "in.bam"
    p.write_bytes(u.bam_file(u.bam_header(), u.records(500)))
    return p


def bad_bam(tmp_path: Path) -> Path:
    p = tmp_path / "bad.bam"
    p.write_bytes(u.bam_file(u.bam_header(), u.records(500))[:-100])  # cut inside the last data block
    return p


def test_symlink_to_dev_null_is_written_through(tmp_path: Path):
    link = tmp_path / "out.bam"
    link.symlink_to("/dev/null")
    res = u.run(["-o", str(link), str(good_bam(tmp_path))])
    assert res.returncode == 0, res.stderr.decode()
    assert link.is_symlink() and os.readlink(link) == "/dev/null", "the symlink was replaced"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode), "/dev/null is no longer a device"
    assert u.pending_outputs(tmp_path) == []


def test_failure_never_removes_a_device(tmp_path: Path):
    link = tmp_path / "out.bam"
    link.symlink_to("/dev/null")
    res = u.run(["-o", str(link), str(bad_bam(tmp_path))])
    assert res.returncode == 1
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_fifo_output_is_streamed_not_replaced(tmp_path: Path):
    fifo = tmp_path / "out.bam"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = u.run(["-o", str(fifo), str(good_bam(tmp_path))], timeout=60)
    reader.join(timeout=60)
    assert res.returncode == 0, res.stderr.decode()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a file"
    assert got and got[0].startswith(b"\x1f\x8b") and got[0].endswith(u.EOF_BLOCK), "reader got no BAM"


def test_symlink_to_regular_file_keeps_the_link(tmp_path: Path):
    target = tmp_path / "real.bam"
    target.write_bytes(b"stale")
    link = tmp_path / "out.bam"
    link.symlink_to(target)
    res = u.run(["-o", str(link), str(good_bam(tmp_path))])
    assert res.returncode == 0, res.stderr.decode()
    assert link.is_symlink(), "the link was replaced by the output"
    assert target.read_bytes().endswith(u.EOF_BLOCK)


def test_failed_in_place_sort_keeps_the_input(tmp_path: Path):
    inp = bad_bam(tmp_path)
    before = inp.read_bytes()
    res = u.run(["-o", str(inp), str(inp)])
    assert res.returncode == 1
    assert inp.read_bytes() == before, "a failed run destroyed its own input"


def test_write_index_beside_a_device_is_refused(tmp_path: Path):
    """`-o /dev/null --write-index` would create /dev/null.csi: refused up front."""
    before = set(os.listdir("/dev"))
    res = u.run(["--write-index", "-o", "/dev/null", str(good_bam(tmp_path))])
    assert res.returncode == 1
    assert "--write-index needs a regular output file" in res.stderr.decode()
    assert not os.path.exists("/dev/null.csi")
    assert set(os.listdir("/dev")) - before == set()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
