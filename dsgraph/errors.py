"""User-facing errors: one line on stderr and exit code 2, never a traceback."""
from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable[..., int | None])


class UserError(Exception):
    """A problem with the user's input (config, data file, paths); printed as one line."""

    exit_code = 2


class ConfigError(UserError):
    """A config file or --set override that is missing, malformed or out of range."""


class DataError(UserError):
    """A dataset file with wrong shapes, dtypes, ranges or values."""


class StorageError(UserError, OSError):
    """A write dsgraph needs failed for a reason of the storage (full disk, read-only file
    system, permissions, quota): one line naming the folder and the cause, exit code 1. Still an
    OSError, so code that falls back on a failed write (a cache, say) keeps doing so."""

    exit_code = 1


class IntegrityError(UserError):
    """A file dsgraph wrote no longer holds what it wrote (its checksum does not match)."""


class JobFailed(Exception):
    """A distributed job ended abnormally (a process died, timed out or was interrupted)."""

    exit_code = 1


def cli_main(fn: F) -> F:
    """Wrap a CLI entry: user errors and job failures print one line and exit non-zero."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (UserError, JobFailed) as exc:
            print(f"error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            print("error: interrupted", file=sys.stderr)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]
