"""Files written whole or not at all: every output goes to a temporary file beside its destination and is
renamed into place (a directory is filled beside it and swapped in), so a full disk, a killed process or a
bad path leaves the previous file as it was. Destinations are checked before the work that fills them.
Failures are one-line :class:`OutputError`s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from recommender.core.errors import RightsizerError


class OutputError(RightsizerError):
    """A destination that cannot be written; the message names it and says why."""


def check_file(path: Path | str) -> Path:
    """Raise OutputError unless ``path`` can be written as a file: its folder exists and is writable, and it is
    not a folder nor a file we may not replace."""
    dest = Path(path)
    if dest.is_dir():
        raise OutputError(f"{dest}: is a directory, not a file to write")
    _check_folder(dest)
    if dest.exists() and not os.access(dest, os.W_OK):
        raise OutputError(f"{dest}: the file is read-only")
    return dest


def check_dir(path: Path | str) -> Path:
    """Raise OutputError unless ``path`` can be (re)placed as a folder."""
    dest = Path(path)
    if dest.exists() and not dest.is_dir():
        raise OutputError(f"{dest}: is a file, not a folder to write")
    _check_folder(dest)
    return dest


def _check_folder(dest: Path) -> None:
    """The folder ``dest`` goes in exists and we may create files in it."""
    folder = _folder(dest)
    if not folder.is_dir():
        raise OutputError(f"{dest}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{dest}: the folder {folder} is not writable")


def _folder(dest: Path) -> Path:
    return dest.parent if str(dest.parent) else Path(".")


def write_file(path: Path | str, data: str | bytes) -> None:
    """``data`` into ``path``, whole or not at all (a previous file stays as it was on failure)."""
    dest = check_file(path)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with _temporary(dest) as tmp:
        with open(tmp, "wb") as fh:
            fh.write(raw)
            fh.flush()
            os.fsync(fh.fileno())
        _replace(tmp, dest)


def write_with(path: Path | str, fill: Callable[[Path], None]) -> None:
    """``fill(temporary path)`` writes the file (e.g. pandas' ``to_csv``), which then replaces ``path``."""
    dest = check_file(path)
    with _temporary(dest) as tmp:
        fill(tmp)
        _replace(tmp, dest)


def replace_dir(path: Path | str, fill: Callable[[Path], None]) -> None:
    """``fill(empty folder beside path)`` writes a folder that then takes ``path``'s place whole; on failure
    the previous folder is left as it was."""
    dest = check_dir(path)
    parent = _folder(dest)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".new", dir=parent))
    except OSError as exc:
        raise OutputError(f"{dest}: cannot write: {exc.strerror}") from None
    old = parent / f".{dest.name}.{tmp.name.split('.')[-2]}.old"
    try:
        fill(tmp)
        if dest.exists():
            os.rename(dest, old)
        try:
            os.rename(tmp, dest)
        except OSError:
            if old.exists():
                os.rename(old, dest)
            raise
    except OSError as exc:
        raise OutputError(f"{exc.filename or dest}: cannot write: {exc.strerror}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def _temporary(dest: Path) -> Iterator[Path]:
    """A temporary file beside ``dest`` (same file system, so the rename is atomic), removed unless renamed."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=_folder(dest))
    except OSError as exc:
        raise OutputError(f"{dest}: cannot write: {exc.strerror}") from None
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
    except OSError as exc:
        raise OutputError(f"{dest}: cannot write: {exc.strerror}") from None
    finally:
        tmp.unlink(missing_ok=True)


def _replace(tmp: Path, dest: Path) -> None:
    """Rename into place with the mode a new file would get (mkstemp's is 0600), or the old file's mode."""
    mode = dest.stat().st_mode & 0o777 if dest.exists() else 0o666 & ~_umask()
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
