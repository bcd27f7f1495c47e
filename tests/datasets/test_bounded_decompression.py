"""Decompression bombs and damaged headers give a Deep500Error naming the file and the
limit, and are refused before more than the limit is read into memory."""
import gzip
import io
import os
import struct
import tarfile
import tracemalloc
import zlib

import numpy as np
import pytest

from deep500.datasets.cifar import load_cifar10
from deep500.datasets.idx import load_mnist, read_idx
from deep500.datasets.tar_dataset import IndexedTarDataset, build_tar_index
from deep500.utils.errors import Deep500Error
from tests.datasets.formats import (cifar10_contents, cifar10_files, mnist_arrays, write_mnist,
                                    write_tar)

MNIST_TRAIN_IMAGES_LIMIT = 16 + 60000 * 28 * 28


def _gzip_of_zeros(path, head: bytes, zeros: int) -> str:
    """``head`` followed by ``zeros`` zero bytes, gzipped in pieces (a small file)."""
    piece = bytes(1 << 20)
    with gzip.open(path, "wb", compresslevel=1) as out:
        out.write(head)
        for start in range(0, zeros, len(piece)):
            out.write(piece[:min(len(piece), zeros - start)])
    return os.fspath(path)


def _peak_bytes(action):
    """(the exception ``action`` raised, peak bytes Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        with pytest.raises(Deep500Error) as error:
            action()
        return error.value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _idx_header(code: int, shape) -> bytes:
    return bytes([0, 0, code, len(shape)]) + struct.pack(f">{len(shape)}I", *shape)


def test_idx_dimensions_whose_product_wraps_int64_are_refused(tmp_path):
    path = tmp_path / "wrap.idx"
    path.write_bytes(_idx_header(0x08, (65536,) * 4) + bytes(64))  # 2^64 values
    error, peak = _peak_bytes(lambda: read_idx(os.fspath(path)))
    assert str(path) in str(error) and f"{(1 << 64) + 20:,}" in str(error)
    assert f"limit of {1 << 31:,} bytes" in str(error) and peak < 1 << 20


def test_idx_gzip_bomb_refused_by_its_header_before_reading(tmp_path):
    path = _gzip_of_zeros(tmp_path / "bomb.gz", _idx_header(0x08, (200 << 20,)), 200 << 20)
    assert os.path.getsize(path) < 2 << 20
    error, peak = _peak_bytes(lambda: read_idx(path, max_bytes=10 << 20))
    assert path in str(error) and f"limit of {10 << 20:,} bytes" in str(error)
    assert peak < 4 << 20


def test_idx_gzip_with_a_bomb_after_its_values_stops_one_byte_past_them(tmp_path):
    path = _gzip_of_zeros(tmp_path / "tail.gz", _idx_header(0x08, (1000,)), 100 << 20)
    error, peak = _peak_bytes(lambda: read_idx(path))
    assert path in str(error) and "extra data" in str(error) and peak < 4 << 20


def test_mnist_path_files_are_limited_to_the_official_size(tmp_path):
    write_mnist(tmp_path, mnist_arrays())
    path = _gzip_of_zeros(tmp_path / "train-images-idx3-ubyte.gz",
                          _idx_header(0x08, (70000, 28, 28)), 70000 * 28 * 28)
    error, peak = _peak_bytes(lambda: load_mnist(path=tmp_path))
    assert path in str(error) and f"limit of {MNIST_TRAIN_IMAGES_LIMIT:,} bytes" in str(error)
    assert "60000×28×28" in str(error) and "d5.read_idx" in str(error)
    assert peak < 4 << 20


def _cifar_archive_with(tmp_path, name: str, size: int) -> str:
    """The CIFAR-10 .tar.gz with member ``name`` replaced by ``size`` zero bytes."""
    contents = cifar10_contents(cifar10_files(per_batch=2))
    archive = tmp_path / "cifar-10-binary.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as out:
        for member, data in contents.items():
            info = tarfile.TarInfo(f"cifar-10-batches-bin/{member}")
            if member == name:
                info.size = size
                out.addfile(info, _Zeros(size))
            else:
                info.size = len(data)
                out.addfile(info, io.BytesIO(data))
    return os.fspath(archive)


class _Zeros:
    """A file object of ``size`` zero bytes that never holds them all."""

    def __init__(self, size):
        self.left = size

    def read(self, count=-1):
        count = self.left if count < 0 else min(count, self.left)
        self.left -= count
        return bytes(count)


def test_cifar_archive_member_larger_than_the_official_file(tmp_path):
    limit = 10000 * 3073
    archive = _cifar_archive_with(tmp_path, "data_batch_2.bin", limit + 3073)
    assert os.path.getsize(archive) < 1 << 20
    error, peak = _peak_bytes(lambda: load_cifar10(path=archive))
    message = str(error)
    assert f"{archive}:cifar-10-batches-bin/data_batch_2.bin" in message
    assert f"limit of {limit:,} bytes" in message and peak < limit // 4


def test_cifar_folder_file_larger_than_the_official_file(tmp_path):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    for member, data in cifar10_contents(cifar10_files(per_batch=2)).items():
        (folder / member).write_bytes(data)
    with open(folder / "test_batch.bin", "r+b") as handle:
        handle.truncate(3 << 30)  # sparse: no disk is used
    error, peak = _peak_bytes(lambda: load_cifar10(path=folder))
    assert str(folder / "test_batch.bin") in str(error) and "limit of" in str(error)
    assert peak < 4 << 20


def _cut_inside_second_header(tmp_path, compress: bool):
    contents = cifar10_contents(cifar10_files(per_batch=2))
    plain = write_tar(tmp_path / "whole.tar",
                      {f"cifar-10-batches-bin/{n}": d for n, d in contents.items()}, mode="w")
    with tarfile.open(plain) as archive:
        second = archive.getmembers()[1].offset
    data = open(plain, "rb").read()[:second + 100]
    path = tmp_path / ("cut.tar.gz" if compress else "cut.tar")
    path.write_bytes(gzip.compress(data) if compress else data)
    return os.fspath(path), second


def test_cifar_archive_cut_inside_a_header_says_so(tmp_path):
    archive, offset = _cut_inside_second_header(tmp_path, compress=True)
    with pytest.raises(Deep500Error) as error:
        load_cifar10(path=archive)
    assert archive in str(error.value)
    assert f"cut inside the header of a member at byte {offset:,}" in str(error.value)


def _png_bytes(width: int, height: int) -> bytes:
    """A 1×1 PNG whose header (IHDR, with a valid CRC) claims ``width``×``height``."""
    from PIL import Image
    buffer = io.BytesIO()
    Image.new("RGB", (1, 1)).save(buffer, "PNG")
    data = bytearray(buffer.getvalue())
    data[16:24] = struct.pack(">II", width, height)  # IHDR data starts at byte 16
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def test_png_bomb_in_a_tar_is_a_deep500_error(tmp_path):
    pytest.importorskip("PIL")
    archive = write_tar(tmp_path / "bomb.tar", {"train/cat/big.png": _png_bytes(60000, 60000)},
                        mode="w")
    dataset = IndexedTarDataset(archive, image_size=(8, 8))
    error, peak = _peak_bytes(lambda: dataset[0])
    assert f"{archive}:train/cat/big.png" in str(error) and "pixels" in str(error)
    assert peak < 4 << 20
    dataset.close()


def test_indexed_tar_cut_inside_a_header_says_so(tmp_path):
    archive, offset = _cut_inside_second_header(tmp_path, compress=False)
    with pytest.raises(Deep500Error) as error:
        build_tar_index(archive, extensions=(".bin",))
    assert archive in str(error.value)
    assert f"cut inside the header of a member at byte {offset:,}" in str(error.value)


def test_indexed_tar_with_a_damaged_header_says_so(tmp_path):
    archive, offset = _cut_inside_second_header(tmp_path, compress=False)
    with open(archive, "ab") as handle:
        handle.write(b"\xff" * 512)
    with pytest.raises(Deep500Error, match=f"member header at byte {offset:,} is damaged"):
        build_tar_index(archive, extensions=(".bin",))


def test_whole_archives_still_read(tmp_path):
    contents = cifar10_contents(cifar10_files(per_batch=2))
    archive = write_tar(tmp_path / "ok.tar",
                        {f"cifar-10-batches-bin/{n}": d for n, d in contents.items()}, mode="w")
    assert len(build_tar_index(archive, extensions=(".bin",))["names"]) == 6
    train, test = load_cifar10(path=archive)
    assert (len(train), len(test)) == (10, 2)
    np.testing.assert_array_equal(read_idx(write_mnist(tmp_path, mnist_arrays())[
        "t10k-labels-idx1-ubyte"]), mnist_arrays()["t10k-labels-idx1-ubyte"])


@pytest.mark.parametrize("kind, what", [(tarfile.GNUTYPE_LONGNAME, "GNU long-name header"),
                                        (tarfile.XHDTYPE, "pax extended header")])
def test_an_extended_tar_header_claiming_a_huge_size_is_refused_before_it_is_read(
        tmp_path, kind, what):
    """tarfile reads a long-name or pax header whole, as large as it claims: from a
    small .tar.gz, 64 MiB here, before any per-member check."""
    from deep500.datasets.bounded_reads import MAX_TAR_EXTENDED_HEADER
    size = 64 << 20
    archive = tmp_path / "cifar-10-binary.tar.gz"
    with tarfile.open(archive, "w:gz", compresslevel=1) as out:
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = kind, size
        out.addfile(info, _Zeros(size))
    assert os.path.getsize(archive) < 1 << 20
    error, peak = _peak_bytes(lambda: load_cifar10(path=os.fspath(archive)))
    assert str(error).startswith(f"{archive}: the {what} at byte 0: its tar header "
                                 f"announces {size:,} bytes, more than the limit of "
                                 f"{MAX_TAR_EXTENDED_HEADER:,} bytes")
    assert peak < 8 << 20
    plain = tmp_path / "train.tar"  # an indexed (uncompressed) tar says the same
    with tarfile.open(plain, "w") as out:
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = kind, 2 * MAX_TAR_EXTENDED_HEADER
        out.addfile(info, _Zeros(info.size))
    with pytest.raises(Deep500Error, match=rf"^{plain}: the {what} at byte 0: its tar "
                                           rf"header announces"):
        build_tar_index(os.fspath(plain))
