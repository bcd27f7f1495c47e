"""CIFAR-10 and CIFAR-100 from their binary versions (Krizhevsky, "Learning Multiple
Layers of Features from Tiny Images", 2009; https://www.cs.toronto.edu/~kriz/cifar.html).

Each binary file is a sequence of fixed-size records: CIFAR-10 ``<label byte><3072
pixel bytes>``, CIFAR-100 ``<coarse label byte><fine label byte><3072 pixel bytes>``;
the pixels are the red, then green, then blue 32×32 plane, row-major, so a record reshapes
directly to C×H×W. The files are read from the extracted folder (``cifar-10-batches-bin``,
``cifar-100-binary``) or straight out of the official ``.tar.gz`` without extracting it.

Samples are float32 N×3×32×32, ``pixel / 255`` in [0, 1]; labels int64.
"""
from __future__ import annotations

import dataclasses
import lzma
import os
import tarfile
import zlib

import numpy as np

from deep500.datasets.bounded_reads import (BoundedTarInfo, check_size, read_exactly,
                                            tar_end_problem)
from deep500.datasets.byte_images import ByteImageDataset
from deep500.datasets.download import Resource, cache_dir, fetch
from deep500.utils.errors import Deep500Error

IMAGE_SHAPE = (3, 32, 32)
PIXEL_BYTES = 3 * 32 * 32
NAMES_MAX_BYTES = 1 << 16  # a class-names file (the official ones are under 2 KB)


@dataclasses.dataclass(frozen=True)
class CifarDataset:
    """How to find and parse one CIFAR binary version."""

    name: str
    archive: Resource
    folder: str  # the folder inside the archive
    train_files: tuple[str, ...]
    test_files: tuple[str, ...]
    label_bytes: int
    classes: dict  # label kind -> number of classes
    label_names: dict  # label kind -> file listing the class names
    train_samples: int = 50000
    test_samples: int = 10000


CIFAR10 = CifarDataset(
    "cifar10",
    Resource("cifar-10-binary.tar.gz",
             "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd",
             ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",)),
    "cifar-10-batches-bin", tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    ("test_batch.bin",), 1, {"fine": 10}, {"fine": "batches.meta.txt"})

CIFAR100 = CifarDataset(
    "cifar100",
    Resource("cifar-100-binary.tar.gz",
             "58a81ae192c23a4be8b1804d68e518ed807d710a4eb253b1f2a199162a40d8ec",
             ("https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",)),
    "cifar-100-binary", ("train.bin",), ("test.bin",), 2, {"coarse": 20, "fine": 100},
    {"coarse": "coarse_label_names.txt", "fine": "fine_label_names.txt"})


def parse_records(raw: bytes, spec: CifarDataset, label: str, source: str):
    """(uint8 N×3×32×32 images, int64 labels) from the bytes of one binary file."""
    record = spec.label_bytes + PIXEL_BYTES
    if not raw or len(raw) % record:
        raise Deep500Error(
            f"{source}: {len(raw)} bytes is not a whole number of {record}-byte records "
            f"(the {spec.name} binary format); the file is truncated or not a {spec.name} "
            f"binary file. Replace it with the original, or delete it to download it again.")
    rows = np.frombuffer(raw, np.uint8).reshape(-1, record)
    # CIFAR-100 stores the coarse label first, then the fine one.
    column = 0 if label == "coarse" or spec.label_bytes == 1 else 1
    labels = rows[:, column].astype(np.int64)
    if labels.max() >= spec.classes[label]:
        raise Deep500Error(f"{source}: label {labels.max()} outside [0, {spec.classes[label]})"
                           f"; is this a {spec.name} binary file?")
    return rows[:, spec.label_bytes:].reshape((-1,) + IMAGE_SHAPE), labels


class _Source:
    """Reads the files of a CIFAR version from its folder or, in one sequential pass,
    from its tar archive (a gzip stream cannot seek back, so members are not opened one
    by one); no file may be larger than the official one."""

    def __init__(self, location: str, spec: CifarDataset):
        self.location, self.spec = location, spec
        self.is_archive = os.path.isfile(location)

    def read(self, filenames, optional=()) -> dict:
        """{filename: bytes} for ``filenames`` (each required) and ``optional`` ones
        (left out if absent)."""
        wanted = list(filenames) + list(optional)
        found = self._read_archive(wanted) if self.is_archive else self._read_folder(wanted)
        for filename in filenames:
            if filename not in found:
                where = (f"it is not the official {self.spec.archive.filename}"
                         if self.is_archive else f"it is not a complete {self.spec.folder} folder")
                raise Deep500Error(f"{self.location} holds no {self.describe(filename)}; "
                                   f"{where}")
        return found

    def limit(self, filename: str) -> int:
        """The most bytes ``filename`` may hold: the size of the official file."""
        record = self.spec.label_bytes + PIXEL_BYTES
        for files, samples in ((self.spec.train_files, self.spec.train_samples),
                               (self.spec.test_files, self.spec.test_samples)):
            if filename in files:
                return samples // len(files) * record
        return NAMES_MAX_BYTES

    def _remedy(self, filename: str) -> str:
        return (f"The official {filename} has {self.limit(filename):,} bytes at most; "
                f"replace {self.location} with the official {self.spec.name} files.")

    def _read_folder(self, wanted) -> dict:
        found = {}
        for filename in wanted:
            path = os.path.join(self.location, filename)
            if os.path.isfile(path):
                check_size(os.path.getsize(path), self.limit(filename), path, "the file",
                           self._remedy(filename))
                with open(path, "rb") as handle:
                    found[filename] = handle.read()
        return found

    def _read_archive(self, wanted) -> dict:
        members = {f"{self.spec.folder}/{filename}": filename for filename in wanted}
        found = {}
        try:
            # Random access over the decompressing reader only ever seeks forward, so it
            # streams like "r|*" but keeps the offset where the headers stopped.
            with tarfile.open(self.location, "r:*", tarinfo=BoundedTarInfo) as archive:
                for member in archive:
                    if member.name in members and member.isfile():
                        filename = members[member.name]
                        check_size(member.size, self.limit(filename), self.describe(filename),
                                   "its tar header", self._remedy(filename))
                        found[filename] = read_exactly(archive.extractfile(member), member.size,
                                                       self.describe(filename))
                        if len(found) == len(members):
                            break
                else:
                    problem = tar_end_problem(archive.fileobj, archive.offset)
                    if problem:
                        raise Deep500Error(f"{self.location}: {problem}. Delete it and "
                                           f"download it again.")
        except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
            raise Deep500Error(f"{self.location}: corrupt or truncated archive ({exc}). Delete "
                               f"it and download it again.") from None
        return found

    def describe(self, filename: str) -> str:
        if self.is_archive:
            return f"{self.location}:{self.spec.folder}/{filename}"
        return os.path.join(self.location, filename)


def _user_source(path: str, spec: CifarDataset) -> str:
    """The folder or archive that ``path`` (given by the user) designates."""
    if os.path.isfile(path):
        return path
    for candidate in (os.path.join(path, spec.folder), path,
                      os.path.join(path, spec.archive.filename)):
        if os.path.isdir(candidate) and os.path.isfile(
                os.path.join(candidate, spec.test_files[0])):
            return candidate
        if os.path.isfile(candidate):
            return candidate
    raise Deep500Error(f"{path} is neither a {spec.folder} folder, nor a folder containing "
                       f"it or {spec.archive.filename}, nor that archive")


def _locate(spec: CifarDataset, root, path, download, verify, progress, mirrors) -> str:
    if path is not None:
        return _user_source(os.fspath(path), spec)
    folder = os.path.join(cache_dir(root), spec.name)
    extracted = os.path.join(folder, spec.folder)
    if os.path.isdir(extracted):  # unpacked there by the user: used as it is
        return extracted
    return fetch(spec.archive, folder, download, verify, progress, mirrors)


def load_cifar(spec: CifarDataset, root=None, download: bool = True, path=None,
               input_node: str = "input", label_node: str = "labels", label: str = "fine",
               verify: bool = True, progress: bool = True, mirrors=None):
    """``(train, test)`` ByteImageDatasets of a CIFAR binary version.

    Args:
        root: cache folder (default: $DEEP500_DATA or ~/.cache/deep500/datasets); files
            live in ``<root>/<name>/`` as the official archive or its extracted folder.
        download: download the archive if missing (else that is an error).
        path: the user's own copy: the extracted folder, a folder containing it, or the
            ``.tar.gz``; used instead of the cache, not checksummed, checked structurally.
        label: CIFAR-100 only: ``"fine"`` (100 classes) or ``"coarse"`` (20 superclasses).
        verify: check the SHA-256 of a downloaded or cached archive against the
            official one.
        mirrors: base URLs to download from instead of the official one.
    """
    if label not in spec.classes:
        raise Deep500Error(f"{spec.name} has labels {sorted(spec.classes)}, not {label!r}")
    source = _Source(_locate(spec, root, path, download, verify, progress, mirrors), spec)
    files = source.read(spec.train_files + spec.test_files, optional=[spec.label_names[label]])
    names = files.get(spec.label_names[label])
    class_names = ([line.strip() for line in names.decode("utf-8", "replace").splitlines()
                    if line.strip()] if names else None)
    datasets = []
    for split, members in (("train", spec.train_files), ("test", spec.test_files)):
        parts = [parse_records(files.pop(f), spec, label, source.describe(f)) for f in members]
        images = np.concatenate([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
        labels = np.concatenate([p[1] for p in parts])
        datasets.append(ByteImageDataset(images, labels, input_node, label_node,
                                         spec.classes[label], f"{spec.name}-{split}",
                                         class_names))
    return tuple(datasets)


def load_cifar10(**options):
    """CIFAR-10: 50,000 training and 10,000 test 32×32 colour images in 10 classes,
    float32 N×3×32×32 in [0, 1]. Options: see ``load_cifar``."""
    return load_cifar(CIFAR10, **options)


def load_cifar100(**options):
    """CIFAR-100: 50,000 + 10,000 images in 100 fine classes (``label="coarse"``: 20
    superclasses), float32 N×3×32×32 in [0, 1]. Options: see ``load_cifar``."""
    return load_cifar(CIFAR100, **options)
