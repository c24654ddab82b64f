"""Errors that are the user's to fix: reported in one line, never as a traceback."""


class UserError(Exception):
    """A mistake in input or environment.  ``str()`` is the whole message:
    it names the thing that is wrong and, where there is one, the fix."""

    exit_code = 2


class MissingPrivilege(UserError):
    exit_code = 1


class MissingDevice(UserError):
    exit_code = 1


class CommandNotFound(UserError):
    """The command to run does not exist; shells exit 127 for this."""

    exit_code = 127


class CommandNotExecutable(UserError):
    """The command exists but cannot be executed; shells exit 126 for this."""

    exit_code = 126
