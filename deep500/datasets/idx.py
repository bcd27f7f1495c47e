"""MNIST and Fashion-MNIST from their IDX files (gzip-compressed or raw).

IDX format (LeCun, Cortes & Burges, http://yann.lecun.com/exdb/mnist/): a 4-byte magic
number ``0x00 0x00 <type> <ndim>``, then ``ndim`` big-endian uint32 dimensions, then the
values, big-endian, in row-major order. Type codes: 0x08 uint8, 0x09 int8, 0x0B int16,
0x0C int32, 0x0D float32, 0x0E float64. MNIST images are ``0x00000803`` (uint8, 3-D:
N×28×28) and labels ``0x00000801`` (uint8, 1-D). Fashion-MNIST (Xiao, Rasul & Vollgraf,
arXiv:1708.07747) uses the same files, names and sizes.

Samples are float32 N×1×28×28, ``pixel / 255`` in [0, 1]; labels int64 in [0, 10).
"""
from __future__ import annotations

import dataclasses
import io
import math
import os
import zlib

import numpy as np

from deep500.datasets.bounded_reads import check_size, open_decompressed, read_exactly
from deep500.datasets.byte_images import ByteImageDataset
from deep500.datasets.download import Resource, cache_dir, fetch
from deep500.utils.errors import Deep500Error

IDX_TYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}
IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801
IDX_MAX_BYTES = 1 << 31  # read_idx's default limit, for files of no known dataset


def parse_idx(raw: bytes, source: str) -> np.ndarray:
    """The array stored in IDX bytes (already decompressed); ``source`` names the file
    in errors."""
    return _read_idx_stream(io.BytesIO(raw), source, len(raw), "")


def read_idx(path: str, max_bytes: int = IDX_MAX_BYTES, remedy: str = "") -> np.ndarray:
    """The array in an IDX file; gzip-compressed files are recognised by their magic
    bytes (1f 8b), whatever their name.

    The header's size (dimensions times item size, in Python ints) is checked against
    ``max_bytes`` before the values are read, and the values are streamed into one
    buffer of that size, so a damaged header or a decompression bomb raises a
    Deep500Error naming the file and the limit instead of exhausting memory.
    ``remedy`` ends that error (what the caller's user should do).
    """
    remedy = remedy or (f"If the file is right, read it with d5.read_idx(path, "
                        f"max_bytes=...) and a larger limit.")
    try:
        with open_decompressed(path) as (stream, compression):
            return _read_idx_stream(stream, path, max_bytes, remedy)
    except (FileNotFoundError, PermissionError, IsADirectoryError) as exc:
        raise Deep500Error(f"{path}: cannot be read ({exc.strerror})") from None
    except (OSError, EOFError, zlib.error) as exc:
        raise Deep500Error(f"{path}: corrupt or truncated gzip file ({exc}). Delete it "
                           f"and download it again.") from None


def _read_idx_stream(stream, source: str, max_bytes: int, remedy: str) -> np.ndarray:
    head = stream.read(4)
    if len(head) < 4 or head[0] != 0 or head[1] != 0 or head[2] not in IDX_TYPES:
        magic = head.hex() or "nothing"
        raise Deep500Error(f"{source}: not an IDX file (magic number 0x{magic}; IDX files "
                           f"start with 00 00, a type code and the number of dimensions). "
                           f"Replace it with the original file.")
    dtype, ndim = np.dtype(IDX_TYPES[head[2]]), head[3]
    dimensions = stream.read(4 * ndim)
    if len(dimensions) < 4 * ndim:
        raise Deep500Error(f"{source}: truncated IDX header ({4 + len(dimensions)} bytes)")
    shape = tuple(int.from_bytes(dimensions[4 * i:4 * i + 4], "big") for i in range(ndim))
    header = 4 + 4 * ndim
    expected = header + math.prod(shape) * dtype.itemsize
    check_size(expected, max_bytes, source,
               f"the IDX header (shape {shape} of {dtype.name})", remedy)
    values = read_exactly(stream, expected - header, source)
    if stream.read(1):
        raise Deep500Error(
            f"{source}: IDX header promises shape {shape} of {dtype.name} ({expected} bytes "
            f"in all) but the file is followed by extra data. Replace it with the original "
            f"file.")
    return np.frombuffer(values, dtype).reshape(shape).astype(dtype.newbyteorder("="))


@dataclasses.dataclass(frozen=True)
class IdxDataset:
    """How to find and check one IDX dataset (MNIST layout: four files)."""

    name: str
    files: dict  # role -> Resource of the .gz file
    classes: int
    class_names: tuple[str, ...]
    image_shape: tuple[int, int, int]
    train_samples: int
    test_samples: int


def _resources(base_urls: tuple[str, ...], checksums: dict) -> dict:
    roles = {"train_images": "train-images-idx3-ubyte", "train_labels": "train-labels-idx1-ubyte",
             "test_images": "t10k-images-idx3-ubyte", "test_labels": "t10k-labels-idx1-ubyte"}
    return {role: Resource(stem + ".gz", checksums[stem],
                           tuple(base + stem + ".gz" for base in base_urls))
            for role, stem in roles.items()}


# SHA-256 of the official .gz files (the same bytes on every mirror listed).
MNIST = IdxDataset(
    "mnist",
    _resources(("https://ossci-datasets.s3.amazonaws.com/mnist/",
                "https://storage.googleapis.com/cvdf-datasets/mnist/"),
               {"train-images-idx3-ubyte":
                    "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
                "train-labels-idx1-ubyte":
                    "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
                "t10k-images-idx3-ubyte":
                    "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
                "t10k-labels-idx1-ubyte":
                    "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"}),
    10, tuple(str(d) for d in range(10)), (1, 28, 28), 60000, 10000)

FASHION_MNIST = IdxDataset(
    "fashion-mnist",
    _resources(("https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/",
                "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"),
               {"train-images-idx3-ubyte":
                    "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
                "train-labels-idx1-ubyte":
                    "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
                "t10k-images-idx3-ubyte":
                    "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
                "t10k-labels-idx1-ubyte":
                    "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"}),
    10, ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
         "Bag", "Ankle boot"), (1, 28, 28), 60000, 10000)


def _user_file(folder: str, resource: Resource) -> str:
    """A file the user already has in ``folder``: gzipped, raw, or raw with the dotted
    names that some unpackers produce (``train-images.idx3-ubyte``)."""
    stem = resource.filename[:-len(".gz")]
    for candidate in (resource.filename, stem, stem.replace("-idx", ".idx")):
        if os.path.isfile(os.path.join(folder, candidate)):
            return os.path.join(folder, candidate)
    raise Deep500Error(f"{folder} holds no {resource.filename} (nor {stem}); pass the "
                       f"folder that holds the four IDX files as path=, or omit path= to "
                       f"download them.")


def _locate(spec: IdxDataset, role: str, root, path, download: bool, verify: bool,
            progress: bool, mirrors) -> str:
    resource = spec.files[role]
    if path is not None:
        return _user_file(os.fspath(path), resource)
    folder = os.path.join(cache_dir(root), spec.name)
    if not os.path.isfile(os.path.join(folder, resource.filename)):
        try:  # raw files that the user unpacked into the cache are taken as they are
            return _user_file(folder, resource)
        except Deep500Error:
            pass
    return fetch(resource, folder, download, verify, progress, mirrors)


def _expected_read(spec: IdxDataset, split: str, kind: str, path: str) -> np.ndarray:
    """One file of a known dataset, read with the official file's size as its limit."""
    samples = spec.train_samples if split == "train" else spec.test_samples
    shape = (samples,) + (spec.image_shape[1:] if kind == "images" else ())
    limit = 4 + 4 * len(shape) + math.prod(shape)
    return read_idx(path, limit, f"{spec.name}'s {split} {kind} are at most "
                                 f"{'×'.join(map(str, shape))} bytes ({limit:,} with the "
                                 f"header): pass the official file, or read other IDX files "
                                 f"with d5.read_idx(path, max_bytes=...).")


def _read_pair(spec: IdxDataset, split: str, images_path: str, labels_path: str):
    images = _expected_read(spec, split, "images", images_path)
    labels = _expected_read(spec, split, "labels", labels_path)
    height, width = spec.image_shape[1:]
    if images.ndim != 3 or images.shape[1:] != (height, width) or images.dtype != np.uint8:
        raise Deep500Error(f"{images_path}: expected uint8 images of N×{height}×{width}, found "
                           f"{images.dtype} {images.shape}; is it the right file?")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise Deep500Error(f"{labels_path}: expected a 1-D uint8 label file, found "
                           f"{labels.dtype} {labels.shape}; is it the right file?")
    if len(images) != len(labels):
        raise Deep500Error(f"{images_path} holds {len(images)} images but {labels_path} "
                           f"holds {len(labels)} labels")
    if labels.size and labels.max() >= spec.classes:
        raise Deep500Error(f"{labels_path}: label {labels.max()} outside [0, {spec.classes})")
    return images[:, None], labels.astype(np.int64)


def load_idx_dataset(spec: IdxDataset, root=None, download: bool = True, path=None,
                     input_node: str = "input", label_node: str = "labels",
                     verify: bool = True, progress: bool = True, mirrors=None):
    """``(train, test)`` ByteImageDatasets for an MNIST-layout dataset.

    Args:
        root: cache folder (default: $DEEP500_DATA or ~/.cache/deep500/datasets); the
            files live in ``<root>/<name>/``.
        download: download missing files (else a missing file is an error).
        path: a folder with the user's own IDX files (gzipped or raw); used instead of
            the cache, never written to and not checksummed, only checked structurally.
        verify: check the SHA-256 of downloaded and cached ``.gz`` files against the
            official ones.
        mirrors: base URLs to download from instead of the official ones.
    """
    located = {role: _locate(spec, role, root, path, download, verify, progress, mirrors)
               for role in spec.files}
    datasets = []
    for split in ("train", "test"):
        images, labels = _read_pair(spec, split, located[f"{split}_images"], located[f"{split}_labels"])
        datasets.append(ByteImageDataset(images, labels, input_node, label_node, spec.classes,
                                         f"{spec.name}-{split}", spec.class_names))
    return tuple(datasets)


def load_mnist(**options):
    """MNIST (LeCun et al., 1998): 60,000 training and 10,000 test handwritten digits,
    float32 N×1×28×28 in [0, 1], int64 labels. Options: see ``load_idx_dataset``."""
    return load_idx_dataset(MNIST, **options)


def load_fashion_mnist(**options):
    """Fashion-MNIST (Xiao et al., 2017): 60,000 + 10,000 Zalando article images, 10
    classes, float32 N×1×28×28 in [0, 1]. Options: see ``load_idx_dataset``."""
    return load_idx_dataset(FASHION_MNIST, **options)
