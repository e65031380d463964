"""The worker's seccomp filter: the system calls that would give the two sides (or two experiments) a channel.

A classic BPF program, built here by hand (no libseccomp needed) and handed to bubblewrap (`--seccomp FD`):

* byte-range locks, `flock`, leases and directory notifications (`fcntl` F_GETLK/F_SETLK/F_SETLKW, the OFD
  variants, F_SETLEASE/F_GETLEASE, F_NOTIFY; `flock`) return success without doing anything: a lock taken by
  one side is never seen by the other (nor by a later experiment), and code that locks its own files still
  runs (each side's writable places are its own, so it loses nothing but a lock nobody else can take);
* page-cache probes (`mincore`, `cachestat`, reads with RWF_NOWAIT, `io_uring`) and file-access watches
  (`inotify`, `fanotify`) fail with ENOSYS / EOPNOTSUPP: which pages of a shared read-only file are cached,
  or who opened it, is not readable through them;
* new user namespaces (`unshare`/`clone` with CLONE_NEWUSER, `clone3`) fail with EPERM / ENOSYS (glibc falls
  back to `clone`), and the 32-bit and x32 system call tables are closed (ENOSYS).

Only x86_64 and aarch64 are covered; elsewhere `program()` returns None and the sandbox runs without it
(docs/design/sandbox-and-security.md says what that leaves open).
"""

from __future__ import annotations

import errno
import os
import platform
import struct
from dataclasses import dataclass

_LD_W_ABS, _JEQ, _JSET, _RET = 0x20, 0x15, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000
LOCK_COMMANDS = (5, 6, 7, 36, 37, 38, 1024, 1025, 1026)  # F_GETLK F_SETLK F_SETLKW F_OFD_* F_*LEASE F_NOTIFY
RWF_NOWAIT = 0x8
CLONE_NEWUSER = 0x10000000


@dataclass(frozen=True)
class Table:
    """One architecture's audit id and the system call numbers the filter names."""

    audit_arch: int
    fcntl: int
    flock: int
    mincore: int
    preadv2: int
    pwritev2: int
    unshare: int
    clone: int
    denied: tuple[int, ...]  # always ENOSYS: inotify, fanotify, cachestat, io_uring, clone3


TABLES = {
    "x86_64": Table(0xC000003E, fcntl=72, flock=73, mincore=27, preadv2=327, pwritev2=328, unshare=272, clone=56,
                    denied=(253, 294, 300, 451, 425, 426, 427, 435)),
    "aarch64": Table(0xC00000B7, fcntl=25, flock=32, mincore=232, preadv2=286, pwritev2=287, unshare=97,
                     clone=220, denied=(26, 262, 451, 425, 426, 427, 435)),
}


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return (code, jt, jf, k)


def _arg(i: int) -> int:
    """Offset of the low 32 bits of argument i in struct seccomp_data (little-endian)."""
    return 16 + 8 * i


def instructions(table: Table) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples; jumps are relative, so blocks are assembled back to front."""
    fake_ok, enosys, eperm, eopnotsupp = (_ERRNO | 0), (_ERRNO | errno.ENOSYS), (_ERRNO | errno.EPERM), \
        (_ERRNO | errno.EOPNOTSUPP)
    prog: list[tuple[int, int, int, int]] = []

    def on_arg(nr: int, arg: int, test: int, value: int, then: int) -> list[tuple[int, int, int, int]]:
        # if nr == this: load arg; if (arg test value) return then; else allow
        body = [_ins(_LD_W_ABS, _arg(arg)), _ins(test, value, 0, 1), _ins(_RET, then), _ins(_RET, _ALLOW)]
        return [_ins(_JEQ, nr, 0, len(body)), *body]

    prog.append(_ins(_LD_W_ABS, 4))  # arch
    prog.append(_ins(_JEQ, table.audit_arch, 1, 0))
    prog.append(_ins(_RET, enosys))  # another ABI (i386 on x86_64, arm32 on aarch64)
    prog.append(_ins(_LD_W_ABS, 0))  # nr
    prog.append(_ins(0x35, _X32_BIT, 0, 1))  # JGE: x32
    prog.append(_ins(_RET, enosys))
    for nr, ret in ((table.flock, fake_ok), (table.mincore, enosys), *((n, enosys) for n in table.denied)):
        prog += [_ins(_JEQ, nr, 0, 1), _ins(_RET, ret)]
    # fcntl: lock, lease and notify commands succeed without effect
    checks = []
    for cmd in LOCK_COMMANDS:
        checks += [_ins(_JEQ, cmd, 0, 1), _ins(_RET, fake_ok)]
    body = [_ins(_LD_W_ABS, _arg(1)), *checks, _ins(_RET, _ALLOW)]
    prog += [_ins(_JEQ, table.fcntl, 0, len(body)), *body]
    prog += on_arg(table.preadv2, 5, _JSET, RWF_NOWAIT, eopnotsupp)  # a skipped block leaves nr loaded
    prog += on_arg(table.pwritev2, 5, _JSET, RWF_NOWAIT, eopnotsupp)
    prog += on_arg(table.unshare, 0, _JSET, CLONE_NEWUSER, eperm)
    prog += on_arg(table.clone, 0, _JSET, CLONE_NEWUSER, eperm)  # clone's flags: argument 0 on both
    prog.append(_ins(_RET, _ALLOW))
    return prog


def program(machine: str | None = None) -> bytes | None:
    """The packed filter for this machine's architecture, or None where it is not covered."""
    table = TABLES.get(machine or platform.machine())
    if table is None:
        return None
    return b"".join(struct.pack("<HBBI", *ins) for ins in instructions(table))


def filter_fd() -> int | None:
    """A file descriptor holding the filter (bubblewrap reads it once), or None where it is not covered."""
    data = program()
    if data is None:
        return None
    fd = os.memfd_create("dit-ar-seccomp", 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
