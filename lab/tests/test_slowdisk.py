"""lab/slowdisk.py: a read that misses the page cache waits; a hit does not;
the disk counts what it served. Needs root, /dev/fuse, libfuse2 and fusepy
(skipped otherwise)."""

import importlib.util
import os
import shutil
import time

import pytest

from lab.slowdisk import SlowDisk

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse") or importlib.util.find_spec("fuse") is None or shutil.which("fusermount") is None,
    reason="needs root, /dev/fuse, fusepy and fusermount",
)


def test_a_miss_waits_a_hit_does_not(tmp_path):
    backing, mount = tmp_path / "b", tmp_path / "m"
    backing.mkdir()
    data = os.urandom(100_000)
    (backing / "f.bin").write_bytes(data)
    os.chmod(backing / "f.bin", 0o644)
    with SlowDisk(str(backing), str(mount), 50, 2, log=lambda *_: None) as disk:
        t = time.monotonic()
        assert (mount / "f.bin").read_bytes() == data
        cold = time.monotonic() - t
        t = time.monotonic()
        assert (mount / "f.bin").read_bytes() == data
        warm = time.monotonic() - t
        assert cold >= 0.05 > warm
        time.sleep(0.3)
        reads, nbytes = disk.served()
        assert reads >= 1 and nbytes >= len(data)
    assert not os.path.ismount(mount)
