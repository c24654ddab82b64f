"""The command as a shell finds and reports it: its path, looked up in PATH,
and its exit status.

Exit statuses follow the shell: the command's own exit code, 128 + N when
signal N killed it, 127 for a command that cannot be found, 126 for one found
but not executable.
"""

from __future__ import annotations

import errno
import os
import stat
from typing import Mapping

from ..errors import CommandNotExecutable, CommandNotFound, UserError
from ..formats.inputs import file_kind


def exit_status(wait_status: int) -> int:
    """The shell's exit status for a ``waitpid`` status: the exit code, or
    128 + N for death by signal N."""
    code = os.waitstatus_to_exitcode(wait_status)
    return code if code >= 0 else 128 - code


def resolve_command(name: str, env: Mapping[str, str] | None = None) -> str:
    """The path ``name`` runs, looked up in PATH as a shell would.

    Raises ``CommandNotFound`` (exit 127) or ``CommandNotExecutable`` (126)."""
    if not name:
        raise CommandNotFound("no command given; put it after '--', e.g. phasewatch run -- ./prog")
    if "/" in name:
        return _check_executable(name)
    search_path = (env if env is not None else os.environ).get("PATH", os.defpath)
    not_executable = None
    for directory in search_path.split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.path.isfile(candidate):
            if os.access(candidate, os.X_OK):
                return candidate
            not_executable = not_executable or candidate
    if not_executable:
        return _check_executable(not_executable)
    raise CommandNotFound(f"{name}: command not found; check the name or PATH, or give its path")


def _check_executable(path: str) -> str:
    if not os.path.exists(path):
        raise CommandNotFound(f"{path}: no such file; check the path")
    if os.path.isdir(path):
        raise CommandNotExecutable(f"{path}: is a directory; give the program inside it")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise CommandNotExecutable(f"{path}: {file_kind(mode)}, not a program; give the "
                                   f"program's file")
    if not os.access(path, os.X_OK):
        raise CommandNotExecutable(f"{path}: permission denied; make it executable (chmod +x)")
    return path


def exec_error(path: str, err: int) -> UserError:
    if err == errno.ENOENT:  # the file exists, so its interpreter or loader does not
        return CommandNotFound(
            f"{path}: cannot execute: its interpreter or loader was not found; check its #! line")
    if err == errno.ENOEXEC:
        return CommandNotExecutable(
            f"{path}: cannot execute: not a program for this machine, nor a script with a #! line")
    return CommandNotExecutable(f"{path}: cannot execute: {os.strerror(err)}")
