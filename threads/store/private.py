"""Private files and directories: what the gateway keeps on disk is its owner's alone.

Session transcripts, the key index, the recovery record and cron's task texts
are created mode 0600 in directories of mode 0700, whatever the umask, and
are opened without following symbolic links (``O_NOFOLLOW``): a link planted
in a shared data directory is refused with :class:`UnsafePathError` naming
it, and its target is never read or written. Renames replace a link, never
write through it.

A directory is *private* when it is a real directory (not a link), owned by
this user and closed to group and others; :func:`dir_problem` says why one is
not, with the command that fixes it.
"""

from __future__ import annotations

import errno
import os
import stat
from contextlib import suppress

from threads.errors import UnsafePathError

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_OPEN_TO_OTHERS = 0o077
_SIDECARS = ("-wal", "-shm", "-journal")
_LINK = "is a symbolic link; the gateway does not follow links where it keeps data (remove it)"


def open_private(path: str | os.PathLike[str], flags: int, mode: int = PRIVATE_FILE) -> int:
    """``os.open`` that refuses a symbolic link at ``path``; a file it creates is ``mode``."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(os.fspath(path), _LINK) from None
        raise


def read_private(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the file at ``path``, read without following a link."""
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write_private(
    path: str | os.PathLike[str], data: bytes, *, sync: bool = False, tmp: str = ""
) -> None:
    """Replace the file at ``path`` with ``data``: a 0600 temporary file renamed over it.

    With ``sync`` the bytes and then the new name are on disk before it returns.
    The temporary file is ``tmp``, by default the path and ``.tmp``.
    """
    tmp = tmp or os.fspath(path) + ".tmp"
    fd = open_private(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, PRIVATE_FILE)  # a temporary file left looser by an older build
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if sync:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def fsync_dir(path: str) -> None:
    """Make the directory's entries (a created, renamed or removed name) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_private_dir(path: str | os.PathLike[str]) -> None:
    """Create ``path`` and its missing parents, each mode 0700; an existing ``path``
    must be a directory and not a link (its mode is left to :func:`dir_problem`)."""
    target = os.path.abspath(path)
    missing: list[str] = []
    probe = target
    while not os.path.lexists(probe):
        missing.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, PRIVATE_DIR)
        except FileExistsError:
            continue  # made meanwhile by another process; checked below when it is ours
        os.chmod(directory, PRIVATE_DIR)  # the umask may have taken the owner's bits
    st = os.lstat(target)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePathError(os.fspath(path), _LINK)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePathError(os.fspath(path), "is not a directory")


def dir_problem(path: str | os.PathLike[str]) -> str | None:
    """Why the existing directory ``path`` is not private (None: it is), with the fix."""
    shown = os.fspath(path)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return (
            "is a symbolic link, which the gateway does not follow: "
            "point the setting at the real directory"
        )
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_uid != os.geteuid():
        return (
            f"is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): "
            "use a directory of your own"
        )
    if st.st_mode & _OPEN_TO_OTHERS:
        mode = stat.S_IMODE(st.st_mode)
        return f"is open to other users (mode {mode:04o}): chmod 700 {shown}"
    return None


def create_private_database(path: str | os.PathLike[str]) -> None:
    """Make the SQLite file at ``path`` exist with mode 0600 before SQLite opens it.

    SQLite opens a database by name and gives its ``-wal`` and ``-shm`` files
    the database's own mode, so creating the file here first (``O_EXCL``: a
    link in its place is not followed) keeps all three private from their
    first byte. An existing database, and side files, that an older build left
    looser are tightened; a link at any of them is refused.

    An existing file is never opened here: closing a descriptor drops every
    POSIX lock this process holds on the file, and SQLite connections of this
    process may hold some.
    """
    name = os.fspath(path)
    try:
        fd = open_private(name, os.O_RDWR | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    else:
        try:
            os.fchmod(fd, PRIVATE_FILE)  # the umask may have taken the owner's bits
        finally:
            os.close(fd)
    for file in (name, *(name + suffix for suffix in _SIDECARS)):
        try:
            st = os.lstat(file)
        except FileNotFoundError:
            continue  # no side file yet: SQLite makes it with the database's mode
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePathError(file, _LINK)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(file, "is not a regular file")
        if st.st_mode & _OPEN_TO_OTHERS and st.st_uid == os.geteuid():
            os.chmod(file, PRIVATE_FILE)
