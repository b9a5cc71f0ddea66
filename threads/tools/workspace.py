"""An agent's workspace: the one directory its files tools and commands may touch.

Paths are relative to the workspace. One that is absolute, or climbs out
with ``..``, is refused; so is any symbolic link on the way, wherever it
points: the path is walked one directory at a time from the workspace's own
descriptor, each step opened without following links (``O_NOFOLLOW``), so a
link planted by a command (``ln -s /etc x``) is never followed, and nothing
can swap one in between a check and the open. Files are created 0600 and
directories 0700; the workspace itself is made 0700 on first use.

The calls here block (they touch the disk): the tools run them in a thread.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from threads.store.private import make_private_dir

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class WorkspaceError(ValueError):
    """A path the workspace refuses, or a file operation that failed; the message says which."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One listed entry: its path relative to the listed directory, its kind and size."""

    path: str
    kind: str  # "file", "dir", "link" or "other"
    size: int


def clean(path: str) -> list[str]:
    """The components of a workspace-relative path (empty: the workspace itself).

    Raises :class:`WorkspaceError` for an absolute path, a path that climbs out
    with ``..``, or a NUL byte.
    """
    if "\0" in path:
        raise WorkspaceError("the path has a NUL byte in it")
    if path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise WorkspaceError(
            f"{path!r} is absolute; give a path relative to your workspace (e.g. 'notes/todo.md')"
        )
    normal = posixpath.normpath(path or ".")
    if normal == ".." or normal.startswith("../"):
        raise WorkspaceError(f"{path!r} leads out of your workspace; stay inside it")
    return [] if normal == "." else normal.split("/")


class Workspace:
    """The directory at ``root``, and safe reads, writes and listings inside it."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def ensure(self) -> None:
        """Create the workspace (0700) when it does not exist yet."""
        make_private_dir(self.root)

    @contextmanager
    def _dir(self, parts: list[str], *, create: bool = False) -> Iterator[int]:
        """A descriptor of the directory ``parts`` names, walked without following links."""
        self.ensure()
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            walked: list[str] = []
            for part in parts:
                walked.append(part)
                if create:
                    with suppress(FileExistsError):
                        os.mkdir(part, 0o700, dir_fd=fd)
                try:
                    inner = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    raise _explain(exc, "/".join(walked), link=_is_link(part, fd)) from None
                os.close(fd)
                fd = inner
            yield fd
        finally:
            os.close(fd)

    def read(self, path: str, *, offset: int, limit: int) -> tuple[bytes, int]:
        """Up to ``limit`` bytes of the file at ``path`` from ``offset``, and its size."""
        parts = clean(path)
        if not parts:
            raise WorkspaceError("give the path of a file, not of the workspace")
        with self._dir(parts[:-1]) as parent:
            try:
                fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            except OSError as exc:
                raise _explain(exc, path) from None
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode):
                    raise WorkspaceError(f"{path!r} is not a regular file")
                return os.pread(fd, limit, offset), st.st_size
            finally:
                os.close(fd)

    def write(self, path: str, data: bytes, *, append: bool) -> int:
        """Write (or append) ``data`` to the file at ``path``, making its directories; its size."""
        parts = clean(path)
        if not parts:
            raise WorkspaceError("give the path of a file, not of the workspace")
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        flags |= os.O_APPEND if append else os.O_TRUNC
        with self._dir(parts[:-1], create=True) as parent:
            try:
                fd = os.open(parts[-1], flags, 0o600, dir_fd=parent)
            except OSError as exc:
                raise _explain(exc, path) from None
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise WorkspaceError(f"{path!r} is not a regular file")
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                return os.fstat(fd).st_size
            finally:
                os.close(fd)

    def list(self, path: str, *, recursive: bool, limit: int) -> tuple[list[Entry], bool]:
        """The entries under the directory at ``path`` (at most ``limit``), and whether more exist.

        A recursive listing does not descend into links (it lists them as links).
        """
        out: list[Entry] = []
        with self._dir(clean(path)) as top:
            if not recursive:
                with os.scandir(top) as found:
                    for item in sorted(found, key=lambda e: e.name):
                        if len(out) == limit:
                            return out, True
                        out.append(_entry(item.name, item.stat(follow_symlinks=False)))
                return out, False
            for directory, dirs, files, dir_fd in os.fwalk(".", dir_fd=top):
                dirs.sort()
                base = "" if directory == "." else directory.removeprefix("./") + "/"
                for name in sorted([*dirs, *files]):
                    if len(out) == limit:
                        return out, True
                    out.append(
                        _entry(base + name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
                    )
        return out, False


def _entry(name: str, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        return Entry(path=name, kind="link", size=0)
    if stat.S_ISDIR(st.st_mode):
        return Entry(path=name, kind="dir", size=0)
    if stat.S_ISREG(st.st_mode):
        return Entry(path=name, kind="file", size=st.st_size)
    return Entry(path=name, kind="other", size=0)


def _explain(exc: OSError, path: str, *, link: bool = False) -> WorkspaceError:
    """A workspace error for a failed open: what is wrong with ``path``, in words."""
    if exc.errno == errno.ELOOP or link:
        return WorkspaceError(
            f"{path!r} is a symbolic link; links are not followed in the workspace"
        )
    if exc.errno == errno.ENOENT:
        return WorkspaceError(f"{path!r} does not exist in your workspace")
    if exc.errno == errno.ENOTDIR:
        return WorkspaceError(f"{path!r} is not a directory")
    if exc.errno == errno.EISDIR:
        return WorkspaceError(f"{path!r} is a directory, not a file")
    return WorkspaceError(f"{path!r}: {exc.strerror or exc}")


def _is_link(name: str, dir_fd: int) -> bool:
    # Opening a link with O_DIRECTORY | O_NOFOLLOW fails with ENOTDIR on Linux, not ELOOP.
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False
