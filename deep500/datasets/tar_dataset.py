"""Images read straight out of an uncompressed tar archive through a saved index.

An ImageNet-style archive holds one folder per class (``<class>/<image>.JPEG``, possibly
under a top folder); the label of an image is the position of its folder's name in the
sorted list of class names. Scanning a tar means reading one 512-byte header per member
across the whole file (POSIX ustar, IEEE Std 1003.1), so it is done once: the index
(member name, data offset, size) is saved next to the archive as ``<archive>.index.npz``
and reused while the archive's size and modification time are unchanged. A sample is
then one ``pread`` at a known offset, with no extraction and no shared file position,
so threads and forked workers can read concurrently.
"""
from __future__ import annotations

import os
import posixpath
import tarfile
import warnings
from typing import Sequence

import numpy as np

from deep500.datasets.bounded_reads import BoundedTarInfo, tar_end_problem
from deep500.datasets.images import stack_samples
from deep500.datasets.jpeg_decoders import JpegDecoder, jpeg_decoder
from deep500.datasets.read_descriptor import SharedReadDescriptor
from deep500.lv2_training.dataset import Dataset
from deep500.utils.errors import Deep500Error

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
INDEX_SUFFIX = ".index.npz"
INDEX_VERSION = 1


def check_member_name(name: str, archive: str) -> None:
    """Refuses member names that would point outside the archive's folder if extracted
    (absolute paths, drive letters, ``..`` components)."""
    normalized = name.replace("\\", "/")
    parts = normalized.split("/")
    if normalized.startswith("/") or (len(parts[0]) == 2 and parts[0][1] == ":") \
            or ".." in parts:
        raise Deep500Error(f"{archive}: member {name!r} would escape the archive (absolute "
                           f"path or '..'); refusing to read this archive. Re-create it with "
                           f"relative member names, e.g. 'tar cf train.tar train/'.")


def build_tar_index(archive: str, extensions: Sequence[str] = IMAGE_EXTENSIONS) -> dict:
    """{"names", "offsets", "sizes"} (arrays, in archive order) of the regular files
    whose names end in one of ``extensions`` (case-insensitive)."""
    extensions = tuple(e.lower() for e in extensions)
    names, offsets, sizes = [], [], []
    try:
        with tarfile.open(archive, "r:", tarinfo=BoundedTarInfo) as tar:
            for member in tar:
                if not member.isfile() or not member.name.lower().endswith(extensions):
                    continue
                check_member_name(member.name, archive)
                names.append(member.name)
                offsets.append(member.offset_data)
                sizes.append(member.size)
            problem = tar_end_problem(tar.fileobj, tar.offset)
    except tarfile.ReadError as exc:
        raise Deep500Error(
            f"{archive}: not an uncompressed tar archive ({exc}). Random access needs a plain "
            f".tar: decompress a .tar.gz first (gunzip), or re-create it with 'tar cf'.") from None
    except (tarfile.TarError, EOFError) as exc:
        raise Deep500Error(f"{archive}: corrupt or truncated tar archive ({exc})") from None
    if problem:
        raise Deep500Error(f"{archive}: {problem}. Re-create or copy the archive again.")
    return {"names": np.array(names, dtype=str), "offsets": np.array(offsets, np.int64),
            "sizes": np.array(sizes, np.int64)}


def _fingerprint(archive: str) -> np.ndarray:
    stat = os.stat(archive)
    return np.array([INDEX_VERSION, stat.st_size, stat.st_mtime_ns], np.int64)


def load_tar_index(archive: str, index_path: str | None = None,
                   extensions: Sequence[str] = IMAGE_EXTENSIONS) -> dict:
    """The index of ``archive``: read from ``index_path`` (default next to the archive)
    if it matches the archive and ``extensions``, else built and saved there (atomically;
    if that fails, a warning is issued and the index is kept in memory only)."""
    index_path = index_path or archive + INDEX_SUFFIX
    fingerprint = _fingerprint(archive)
    suffixes = np.array(sorted(e.lower() for e in extensions), dtype=str)
    if os.path.isfile(index_path):
        try:
            with np.load(index_path, allow_pickle=False) as saved:
                if np.array_equal(saved["fingerprint"], fingerprint) and \
                        np.array_equal(saved["extensions"], suffixes):
                    index = {key: saved[key] for key in ("names", "offsets", "sizes")}
                    for name in index["names"]:  # the index file is input too
                        check_member_name(str(name), archive)
                    ends = index["offsets"] + index["sizes"]
                    if ends.size and (index["offsets"].min() < 0 or ends.max() > fingerprint[1]):
                        raise Deep500Error(f"{index_path}: offsets outside {archive}; delete "
                                           f"the index to rebuild it")
                    return index
        except (OSError, KeyError, ValueError) as exc:
            warnings.warn(f"{index_path} is unreadable ({exc}); rebuilding it", stacklevel=2)
    index = build_tar_index(archive, extensions)
    temporary = f"{index_path}.{os.getpid()}.tmp.npz"
    try:
        np.savez(temporary, fingerprint=fingerprint, extensions=suffixes, **index)
        os.replace(temporary, index_path)
    except OSError as exc:
        if os.path.exists(temporary):
            os.remove(temporary)
        warnings.warn(f"Could not save the index of {archive} to {index_path} ({exc}); it "
                      f"will be rebuilt next time. Pass index_path= to a writable place.",
                      stacklevel=2)
    return index


class IndexedTarDataset(SharedReadDescriptor, Dataset):
    """Labelled images in a tar archive of class folders, decoded on access.

    Samples are float32 C×H×W in [0, 1] (RGB or grayscale); labels int64.

    Args:
        archive: path of an uncompressed ``.tar``.
        image_size: ``(height, width)`` of every sample (``None``: native sizes, which
            stack into minibatches only if all images are equally large).
        crop: with ``image_size``: scale the shorter side and centre-crop (``True``) or
            stretch (``False``).
        class_names: the classes in label order (default: the sorted folder names found);
            pass the training set's list to a test set so labels agree.
        index_path: where the index is saved (default ``<archive>.index.npz``).
        decoder: the JPEG decoder, by name (``pil``, ``torchvision``, ``tensorflow``;
            :mod:`deep500.datasets.jpeg_decoders`) or as an object; only ``pil`` resizes
            and reads PNG, the others need images already of ``image_size`` (or
            ``image_size=None``).
    """

    def __init__(self, archive: str, image_size: tuple[int, int] | None = (224, 224),
                 crop: bool = True, channels: int = 3, class_names: Sequence[str] | None = None,
                 index_path: str | None = None, extensions: Sequence[str] = IMAGE_EXTENSIONS,
                 input_node: str = "input", label_node: str | None = "labels",
                 name: str | None = None, decoder: str | JpegDecoder = "pil"):
        archive = os.path.abspath(os.fspath(archive))
        self.decoder = jpeg_decoder(decoder)
        if not os.path.isfile(archive):
            raise Deep500Error(f"Tar archive {archive} does not exist")
        index = load_tar_index(archive, index_path, extensions)
        folders = []
        for member in index["names"]:
            folder = posixpath.basename(posixpath.dirname(str(member)))
            if not folder:
                raise Deep500Error(f"{archive}: member {member!r} is not inside a class folder; "
                                   f"labels come from folder names (<class>/<image>)")
            folders.append(folder)
        if class_names is None:
            class_names = sorted(set(folders))
        class_names = [str(c) for c in class_names]
        lookup = {c: i for i, c in enumerate(class_names)}
        unknown = sorted(set(folders) - lookup.keys())
        if unknown:
            raise Deep500Error(f"{archive}: class folders {unknown[:5]} are not in the given "
                               f"class_names ({len(class_names)} classes)")
        super().__init__(input_node, label_node, len(class_names),
                         name or os.path.basename(archive))
        self.archive = archive
        self.members = index["names"]
        self.offsets = index["offsets"]
        self.sizes = index["sizes"]
        self.label_values = np.array([lookup[f] for f in folders], np.int64)
        self.class_names = class_names
        self.image_size = None if image_size is None else tuple(int(s) for s in image_size)
        self.crop = crop
        self.channels = channels
        self._init_descriptor()

    def __len__(self) -> int:
        return len(self.members)

    def __getitem__(self, index) -> dict:
        index = self._check_index(index)
        if isinstance(index, int):
            sample = {self.input_node: self.image(index)}
        else:
            sample = {self.input_node: stack_samples([self.image(int(i)) for i in index],
                                                     self.name)}
        if self.label_node is not None:
            sample[self.label_node] = self.label_values[index]
        return sample

    @property
    def sample_shape(self) -> tuple:
        if self.image_size is not None:
            return (self.channels,) + self.image_size
        return super().sample_shape

    def labels(self) -> np.ndarray | None:
        return self.label_values if self.label_node is not None else None

    def read_member(self, i: int) -> bytes:
        """The raw bytes of image ``i`` (one positioned read)."""
        offset, size = int(self.offsets[i]), int(self.sizes[i])
        fd = self._descriptor()
        if hasattr(os, "pread"):
            data = os.pread(fd, size, offset)
        else:  # no pread (Windows): seek and read under a lock
            with self._lock:
                os.lseek(fd, offset, os.SEEK_SET)
                data = os.read(fd, size)
        if len(data) != size:
            raise Deep500Error(f"{self.archive}: member {self.members[i]!r} is truncated "
                               f"({len(data)} of {size} bytes); the archive changed or is "
                               f"damaged; delete {self.archive + INDEX_SUFFIX} if you replaced it")
        return data

    def image(self, i: int) -> np.ndarray:
        """Image ``i`` decoded to float32 C×H×W."""
        return self.decoder.decode(self.read_member(i), f"{self.archive}:{self.members[i]}",
                                   self.image_size, self.crop, self.channels)

    def _descriptor_path(self) -> str:
        return self.archive
