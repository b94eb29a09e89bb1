"""Run a command under the system-call sandbox of a systemd unit, without systemd.

Where systemd cannot start contrib/larbinpy.service (a container, CI), this reproduces what its
sandbox does to the process's system calls, so a test can crawl inside it:
- `SystemCallFilter=` (groups as `systemd-analyze syscall-filter` lists them; an allow-list,
  then `~` lines taking groups out of it), other calls failing with EPERM, through libseccomp;
- `RestrictAddressFamilies=`: socket() only for the families listed;
- `MemoryDenyWriteExecute=`: the kernel's own form of it (prctl PR_SET_MDWE, Linux 6.3+):
  no mapping both writable and executable, no mapping made executable later;
- `NoNewPrivileges=`.
The file-system settings (ProtectSystem=, the directories) are not reproduced here.

usage: python tests/unitsandbox.py UNIT COMMAND [ARG...]
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import socket
import subprocess
import sys
from pathlib import Path

PR_SET_NO_NEW_PRIVS = 38
PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN = 65, 1
SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
NR_SCMP_ERROR = -1


def scmp_act_errno(code: int) -> int:
    """libseccomp's SCMP_ACT_ERRNO(code)."""
    return 0x00050000 | (code & 0xFFFF)


class ScmpArgCmp(ctypes.Structure):
    """libseccomp's struct scmp_arg_cmp: compare one argument of the call."""

    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int),
                ("datum_a", ctypes.c_uint64), ("datum_b", ctypes.c_uint64)]


def unit_settings(path: Path) -> dict[str, list[str]]:
    """Every `Key=value` of a unit file, values in file order (an empty one resets the list,
    as systemd does for list settings)."""
    settings: dict[str, list[str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;[" or "=" not in line:
            continue
        name, value = (part.strip() for part in line.split("=", 1))
        settings[name] = [*settings.get(name, []), value] if value else []
    return settings


def syscall_groups() -> dict[str, list[str]]:
    """`systemd-analyze syscall-filter`: group name -> its entries (calls and groups)."""
    out = subprocess.run(["systemd-analyze", "syscall-filter"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    groups: dict[str, list[str]] = {}
    current: list[str] = []
    for line in out.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    """System calls named by `names`, groups expanded."""
    calls: set[str] = set()
    for name in names:
        calls |= expand(groups[name], groups) if name.startswith("@") else {name}
    return calls


def allowed_calls(settings: dict[str, list[str]]) -> set[str]:
    """The calls the unit's SystemCallFilter= lines allow (it must start with an allow-list)."""
    groups = syscall_groups()
    allowed: set[str] | None = None
    for value in settings.get("SystemCallFilter", []):
        if value.startswith("~"):
            if allowed is None:
                raise ValueError("a deny-list filter is not reproduced")
            allowed -= expand(value[1:].split(), groups)
        else:
            allowed = (allowed or set()) | expand(value.split(), groups)
    if allowed is None:
        raise ValueError("the unit has no SystemCallFilter=")
    return allowed


def enter(settings: dict[str, list[str]]) -> None:
    """Put this process (and what it executes) in the unit's system-call sandbox."""
    libc = ctypes.CDLL(None, use_errno=True)
    calls = allowed_calls(settings)  # before the filter: it runs systemd-analyze
    families = [getattr(socket, name) for value in settings.get("RestrictAddressFamilies", [])
                for name in value.split()]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if settings.get("MemoryDenyWriteExecute") == ["yes"] and libc.prctl(
            PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_MDWE (Linux 6.3 or later)")
    seccomp = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    seccomp.seccomp_init.restype = ctypes.c_void_p
    seccomp.seccomp_init.argtypes = [ctypes.c_uint32]
    seccomp.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p]
    seccomp.seccomp_load.argtypes = [ctypes.c_void_p]
    ctx = seccomp.seccomp_init(scmp_act_errno(errno.EPERM))
    for name in sorted(calls - ({"socket"} if families else set())):
        nr = seccomp.seccomp_syscall_resolve_name(name.encode())
        if nr != NR_SCMP_ERROR:  # a call of another architecture
            _add(seccomp, ctx, nr, None)
    socket_nr = seccomp.seccomp_syscall_resolve_name(b"socket")
    for family in families:
        _add(seccomp, ctx, socket_nr, ScmpArgCmp(0, SCMP_CMP_EQ, family, 0))
    if seccomp.seccomp_load(ctx) != 0:
        raise OSError("seccomp_load failed")


def _add(seccomp: ctypes.CDLL, ctx: int, nr: int, cmp: ScmpArgCmp | None) -> None:
    """Allow call `nr` (when its first argument matches `cmp`, if given)."""
    rc = seccomp.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, int(cmp is not None),
                                        ctypes.byref(cmp) if cmp is not None else None)
    if rc != 0:
        raise OSError(-rc, f"seccomp_rule_add for call {nr}")


def main(argv: list[str]) -> None:
    """Enter the sandbox of unit argv[0], then execute argv[1:]."""
    enter(unit_settings(Path(argv[0])))
    os.execv(argv[1], argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
