"""What a process uses, read from outside it: its resident memory and its open descriptors.

Linux has them in ``/proc``; macOS has no procfs, and answers through ``proc_pidinfo`` in its
system library (``libproc``), as ``ps`` and ``lsof`` do. Elsewhere both are unknown (None)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from functools import cache

#: ``proc_pidinfo``'s flavours (``<sys/proc_info.h>``) and the sizes of what they fill.
PROC_PIDLISTFDS = 1
PROC_FDINFO_SIZE = 8  # struct proc_fdinfo: int32 fd, uint32 type
PROC_PIDTASKINFO = 4
PROC_TASKINFO_SIZE = 96  # struct proc_taskinfo: virtual size, resident size, then counters
#: Room for this many descriptors in one ``PROC_PIDLISTFDS`` call; more is asked for if full.
FDS_AT_FIRST = 256


def resident_bytes(pid: int) -> int | None:
    """Process ``pid``'s resident memory in bytes, or None if it is gone or cannot be read."""
    if sys.platform == "darwin":
        return _darwin_resident_bytes(pid)
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, IndexError, ValueError):
        return None


def open_descriptors(pid: int) -> int | None:
    """How many descriptors process ``pid`` has open, or None if it is gone or cannot be read."""
    if sys.platform == "darwin":
        return _darwin_open_descriptors(pid)
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@cache
def _libproc() -> ctypes.CDLL:
    # libproc is part of libSystem, which every macOS process has loaded.
    lib = ctypes.CDLL(ctypes.util.find_library("proc") or "/usr/lib/libproc.dylib", use_errno=True)
    lib.proc_pidinfo.argtypes = [
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_uint64,
        ctypes.c_void_p,
        ctypes.c_int,
    ]
    lib.proc_pidinfo.restype = ctypes.c_int
    return lib


def _darwin_resident_bytes(pid: int) -> int | None:
    buf = ctypes.create_string_buffer(PROC_TASKINFO_SIZE)
    if (
        _libproc().proc_pidinfo(pid, PROC_PIDTASKINFO, 0, buf, PROC_TASKINFO_SIZE)
        != PROC_TASKINFO_SIZE
    ):
        return None
    return int.from_bytes(buf.raw[8:16], sys.byteorder)


def _darwin_open_descriptors(pid: int) -> int | None:
    room = FDS_AT_FIRST
    while True:
        size = room * PROC_FDINFO_SIZE
        buf = ctypes.create_string_buffer(size)
        filled = _libproc().proc_pidinfo(pid, PROC_PIDLISTFDS, 0, buf, size)
        if filled <= 0:
            return None
        if filled < size:  # a full buffer may have left some out
            return filled // PROC_FDINFO_SIZE
        room *= 4
