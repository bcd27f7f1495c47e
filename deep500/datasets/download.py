"""Downloading dataset files into a cache folder, verified by SHA-256.

The cache folder is, in order of precedence, the ``root`` argument, the environment
variable ``DEEP500_DATA``, or ``~/.cache/deep500/datasets``; each dataset keeps its files
in a subfolder named after it. A download goes to a temporary file in the destination
folder, is hashed while it streams, and is renamed into place (``os.replace``, atomic on
one file system) only when its checksum matches, so an interrupted or corrupt transfer
never leaves a file that a later run would trust.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from typing import Sequence

from deep500.utils.errors import Deep500Error

ENVIRONMENT_VARIABLE = "DEEP500_DATA"
CHUNK_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class Resource:
    """One official file: its name, SHA-256 and the URLs it can be downloaded from
    (mirrors, tried in order)."""

    filename: str
    sha256: str
    urls: tuple[str, ...]


def cache_dir(root: str | os.PathLike | None = None) -> str:
    """The folder that holds downloaded datasets (not created here)."""
    if root is not None:
        return os.path.abspath(os.path.expanduser(os.fspath(root)))
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return os.path.abspath(os.path.expanduser(os.environ[ENVIRONMENT_VARIABLE]))
    return os.path.join(os.path.expanduser("~"), ".cache", "deep500", "datasets")


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: str, expected: str) -> None:
    """Raises a Deep500Error if the file's SHA-256 is not ``expected``."""
    actual = sha256_of(path)
    if actual != expected.lower():
        raise Deep500Error(
            f"{path}: SHA-256 is {actual}, but the official file has {expected}. The file "
            f"is corrupt, truncated or not the official one: delete it and load the "
            f"dataset again to download it anew.")


def urlopen(url: str, timeout: float):
    """``urllib.request.urlopen``, imported when a download starts: with it come ssl and
    http.client, which every process that imports the datasets would otherwise load."""
    from urllib.request import urlopen as open_url
    return open_url(url, timeout=timeout)


def download(url: str, destination: str, sha256: str | None = None, progress: bool = True,
             timeout: float = 60.0) -> str:
    """Downloads ``url`` to ``destination`` (a file path) with a tqdm progress bar and,
    if ``sha256`` is given, verifies it before the file appears under its final name.

    Returns ``destination``. Raises a Deep500Error naming the URL if the transfer fails
    or the checksum does not match; no partial file is left behind in either case.
    """
    import http.client

    from tqdm.auto import tqdm

    folder = os.path.dirname(os.path.abspath(destination)) or "."
    os.makedirs(folder, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(destination)}.",
                                         suffix=".part")
    digest = hashlib.sha256()
    try:
        with os.fdopen(handle, "wb") as out:
            try:
                with urlopen(url, timeout=timeout) as response:
                    length = response.headers.get("Content-Length") if response.headers else None
                    length = int(length) if length else None
                    received = 0
                    with tqdm(total=length, unit="B", unit_scale=True, unit_divisor=1024,
                              disable=not progress, desc=os.path.basename(destination),
                              leave=False) as bar:
                        for chunk in iter(lambda: response.read(CHUNK_BYTES), b""):
                            out.write(chunk)
                            digest.update(chunk)
                            received += len(chunk)
                            bar.update(len(chunk))
            # URLError and socket errors are OSErrors; IncompleteRead is an HTTPException
            except (OSError, ValueError, http.client.HTTPException) as exc:
                raise Deep500Error(f"Downloading {url} failed: {exc!r}") from exc
        if length is not None and received != length:
            raise Deep500Error(f"Downloading {url} failed: received {received} of {length} "
                               f"bytes")
        if sha256 is not None and digest.hexdigest() != sha256.lower():
            raise Deep500Error(
                f"Downloaded {url}, but its SHA-256 is {digest.hexdigest()} instead of the "
                f"official {sha256}: the server sent a different or damaged file. Nothing "
                f"was saved; try again later or another mirror.")
        os.replace(temporary, destination)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise
    return destination


def fetch(resource: Resource, folder: str, download_missing: bool = True,
          verify: bool = True, progress: bool = True,
          mirrors: Sequence[str] | None = None) -> str:
    """The path of ``resource`` inside ``folder``: verified if already there, else
    downloaded from its URLs (or from ``mirrors``, base URLs to which the file name is
    appended) in order until one succeeds."""
    path = os.path.join(folder, resource.filename)
    if os.path.isfile(path):
        if verify:
            verify_sha256(path, resource.sha256)
        return path
    urls = ([base.rstrip("/") + "/" + resource.filename for base in mirrors]
            if mirrors else list(resource.urls))
    if not download_missing:
        raise Deep500Error(
            f"{path} does not exist and download=False. Download it from {urls[0]} "
            f"into {folder}, or pass download=True.")
    failures = []
    for url in urls:
        try:
            return download(url, path, resource.sha256 if verify else None, progress)
        except Deep500Error as exc:
            failures.append(str(exc))
    raise Deep500Error(
        f"Could not download {resource.filename} into {folder}:\n  " + "\n  ".join(failures)
        + f"\nDownload it by hand (SHA-256 {resource.sha256}) and place it at {path}, or "
        f"set {ENVIRONMENT_VARIABLE} to a folder that holds it.")
