"""Framed files: a magic line, the format version, a SHA-256 of the body (64 hex digits), then the body. The
report cache (``collectors.prometheus.store``) and the pipeline's memo (``recommender.pipeline.memostore``) are
both framed so.

A framed file is written whole or not at all (``recommender.core.writes``) and streamed: the body comes as
chunks written straight to the temporary file while their SHA-256 is taken, and the digest is written in its
place before the file is synced and renamed (no whole-body copy in memory). Reading checks the magic line, the
version and the checksum before the body is handed out, so nothing of a truncated or altered file is used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

DIGITS = 64  # hex digits of a SHA-256


def header(magic: bytes, version: int, digest: str = "0" * DIGITS) -> bytes:
    """The bytes before the body: the magic line, the version line and the checksum line."""
    return magic + f"{version}\n{digest}\n".encode("ascii")


def frame(magic: bytes, version: int, body: Iterable[bytes | memoryview]) -> bytes:
    """The whole file as bytes (small files and tests; :func:`write` streams the same bytes to a file)."""
    h, parts = hashlib.sha256(), []
    for chunk in body:
        h.update(chunk)
        parts.append(bytes(chunk))
    return header(magic, version, h.hexdigest()) + b"".join(parts)


def write(path: Path | str, magic: bytes, version: int, body: Iterable[bytes | memoryview]) -> None:
    """Write a framed file whose body is the chunks of ``body`` in order, whole or not at all (OutputError
    where it cannot be written; an exception ``body`` raises leaves the previous file as it was)."""
    from recommender.core.writes import write_with

    def fill(tmp: Path) -> None:
        h = hashlib.sha256()
        with open(tmp, "wb") as fh:
            fh.write(header(magic, version))
            for chunk in body:
                h.update(chunk)
                fh.write(chunk)
            fh.seek(len(magic) + len(f"{version}\n"))
            fh.write(h.hexdigest().encode("ascii"))
            fh.flush()
            os.fsync(fh.fileno())

    write_with(path, fill)


def read(data: bytes, magic: bytes, version: int, what: str, error: type[Exception]) -> memoryview:
    """The body of a framed file's bytes (a view, not a copy), once its magic line, version and checksum are
    checked; ``error`` (its message says why) when the bytes are not ``what`` (e.g. "gpu-rightsizer usage
    cache"), of another version, truncated or altered."""
    view = memoryview(data)
    if view[:len(magic)] != magic:
        raise error(f"not a {what}")
    at = len(magic)
    end = data.find(b"\n", at, at + 32)
    found = bytes(view[at:end if end >= 0 else at + 20])
    if found != str(version).encode("ascii"):
        raise error(f"written in format {found[:20].decode('ascii', 'replace')!r}, this version reads {version}")
    checksum, body = view[end + 1:end + 1 + DIGITS], view[end + 2 + DIGITS:]
    if data[end + 1 + DIGITS:end + 2 + DIGITS] != b"\n" or \
            hashlib.sha256(body).hexdigest().encode("ascii") != checksum:
        raise error("truncated or altered (checksum mismatch)")
    return body
