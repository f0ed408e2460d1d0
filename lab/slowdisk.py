"""A disk with a seek time, for the disk-bound runs of flash-arch (issue 24).

This machine's virtual disk is cached by the host: a page-cache miss costs a
copy of a few tens of microseconds, and a blkio throttle only caps the rate
(a server that reads one range at a time still reaches it). The thesis's
disk-bound results (Figure 4.8) come from a disk whose every read waits for a
seek while the CPU could do other work, and which serves several reads at
once. This is that disk: a read-only FUSE pass-through of a directory whose
every read (a page-cache miss of the reader: FUSE keeps the page cache)
waits LATENCY before it is served, at most SPINDLES reads at a time (more
wait their turn). Metadata (lookups, attributes) is cached by the kernel for
an hour and costs no latency: the thesis's servers cached it too.

    python3 -m lab.slowdisk BACKING MOUNTPOINT [--latency-ms 5] [--spindles 4] [--stats FILE]

With --stats, the reads served and their bytes so far are written to FILE
(`READS BYTES`) ten times a second: a FUSE read is no block I/O, so neither
/proc/PID/io nor the blkio controller counts it.

`SlowDisk` (a context manager) mounts it in a child process and unmounts it.
Needs root (or fusermount), /dev/fuse, libfuse2 and fusepy.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
import threading
import time


def serve(backing: str, mount: str, latency_s: float, spindles: int, stats: str | None = None) -> None:
    from fuse import FUSE, FuseOSError, Operations  # fusepy

    gate = threading.BoundedSemaphore(spindles)
    served = [0, 0]  # reads, bytes (under the GIL)

    def report() -> None:
        while True:
            tmp = stats + ".tmp"
            with open(tmp, "w") as f:
                f.write(f"{served[0]} {served[1]}\n")
            os.replace(tmp, stats)
            time.sleep(0.1)

    if stats:
        threading.Thread(target=report, daemon=True).start()

    class Passthrough(Operations):
        def _path(self, p: str) -> str:
            return os.path.join(backing, p.lstrip("/"))

        def getattr(self, path, fh=None):
            try:
                st = os.lstat(self._path(path))
            except OSError as e:
                raise FuseOSError(e.errno) from e
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
            return {k: getattr(st, k) for k in keys}

        def readdir(self, path, fh):
            return [".", ".."] + os.listdir(self._path(path))

        def open(self, path, flags):
            if flags & (os.O_WRONLY | os.O_RDWR):
                raise FuseOSError(errno.EROFS)
            return os.open(self._path(path), os.O_RDONLY)

        def read(self, path, size, offset, fh):
            with gate:
                time.sleep(latency_s)
                data = os.pread(fh, size, offset)
            served[0] += 1
            served[1] += len(data)
            return data

        def release(self, path, fh):
            os.close(fh)
            return 0

        def statfs(self, path):
            st = os.statvfs(backing)
            return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_namemax")}

    FUSE(Passthrough(), mount, foreground=True, nothreads=False, ro=True, allow_other=True, kernel_cache=True,
         entry_timeout=3600, attr_timeout=3600, negative_timeout=3600, fsname="weft-slowdisk")  # fmt: skip


class SlowDisk:
    """`backing` seen through a slow disk at `mount` while in the `with`."""

    def __init__(self, backing: str, mount: str, latency_ms: float, spindles: int, log=print):
        self.backing, self.mount, self.latency_ms, self.spindles, self.log = backing, mount, latency_ms, spindles, log
        self.proc: subprocess.Popen | None = None
        self.stats = mount.rstrip("/") + ".stats"

    def served(self) -> tuple[int, int]:
        """(reads, bytes) served so far (up to 0.1 s old)."""
        try:
            with open(self.stats) as f:
                reads, nbytes = f.read().split()
            return int(reads), int(nbytes)
        except (OSError, ValueError):
            return 0, 0

    def __enter__(self) -> "SlowDisk":
        os.makedirs(self.mount, exist_ok=True)
        os.chmod(self.mount, 0o755)
        cmd = [sys.executable, "-m", "lab.slowdisk", self.backing, self.mount, "--latency-ms", str(self.latency_ms), "--spindles", str(self.spindles), "--stats", self.stats]
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.proc = subprocess.Popen(cmd, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"slow disk did not start: {self.proc.stderr.read().decode(errors='replace')[-500:]}")
            if os.path.ismount(self.mount):
                self.log(f"  slow disk: {self.backing} at {self.mount}, {self.latency_ms:g} ms per read, {self.spindles} at a time")
                return self
            time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("slow disk not mounted after 15 s")

    def __exit__(self, *exc) -> None:
        for cmd in (["fusermount", "-u", self.mount], ["umount", "-l", self.mount]):
            if not os.path.ismount(self.mount):
                break
            subprocess.run(cmd, capture_output=True, timeout=30)
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def main() -> int:
    p = argparse.ArgumentParser(prog="python3 -m lab.slowdisk", description=__doc__.splitlines()[0])
    p.add_argument("backing")
    p.add_argument("mount")
    p.add_argument("--latency-ms", type=float, default=5.0)
    p.add_argument("--spindles", type=int, default=4)
    p.add_argument("--stats", default=None)
    a = p.parse_args()
    serve(os.path.abspath(a.backing), os.path.abspath(a.mount), a.latency_ms / 1000, max(1, a.spindles), a.stats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
