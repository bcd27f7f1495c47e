"""IdxFileDataset reads the samples of each minibatch from the IDX file and gives what
the in-memory dataset gives; IDX files written here read back with d5's reader."""
import gzip

import numpy as np
import pytest

from deep500.datasets import ByteImageDataset, read_idx
from deep500.datasets.format_writers import idx_bytes, write_idx
from deep500.datasets.idx_file import IdxFileDataset
from deep500.utils.errors import Deep500Error


@pytest.fixture
def stored(tmp_path):
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (50, 3, 4, 5), dtype=np.uint8)
    labels = rng.integers(0, 7, 50).astype(np.uint8)
    return (images, labels, write_idx(str(tmp_path / "images"), images),
            write_idx(str(tmp_path / "labels"), labels))


@pytest.mark.parametrize("indices", [np.arange(10, 26), np.array([7, 3, 4, 5, 49, 0]),
                                     np.random.default_rng(0).permutation(50)])
def test_file_reads_equal_the_in_memory_dataset(stored, indices):
    images, labels, image_path, label_path = stored
    from_file = IdxFileDataset(image_path, label_path)
    in_memory = ByteImageDataset(images, labels)
    assert len(from_file) == 50 and from_file.sample_shape == (3, 4, 5)
    assert from_file.classes == int(labels.max()) + 1
    got, expected = from_file[indices.astype(np.int64)], in_memory[indices.astype(np.int64)]
    np.testing.assert_array_equal(got["input"], expected["input"])
    np.testing.assert_array_equal(got["labels"], expected["labels"])
    assert got["input"].dtype == np.float32 and got["labels"].dtype == np.int64


def test_three_dimensional_images_get_one_channel(tmp_path):
    images = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    dataset = IdxFileDataset(write_idx(str(tmp_path / "i"), images))
    assert dataset.sample_shape == (1, 3, 3) and dataset.label_node is None
    np.testing.assert_array_equal(dataset[1]["input"][0], images[1] / np.float32(255))


def test_written_idx_reads_back(tmp_path):
    array = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    np.testing.assert_array_equal(read_idx(write_idx(str(tmp_path / "a"), array)), array)


def test_files_that_do_not_fit_are_refused(stored, tmp_path):
    images, _, image_path, label_path = stored
    gz = tmp_path / "images.gz"
    gz.write_bytes(gzip.compress(idx_bytes(images)))
    with pytest.raises(Deep500Error, match="not an uncompressed IDX file.*decompress"):
        IdxFileDataset(str(gz))
    cut = tmp_path / "cut"
    cut.write_bytes(idx_bytes(images)[:-7])
    with pytest.raises(Deep500Error, match=r"promises shape \(50, 3, 4, 5\) of uint8"):
        IdxFileDataset(str(cut))
    few = write_idx(str(tmp_path / "few"), np.zeros(3, np.uint8))
    with pytest.raises(Deep500Error, match="3 labels for the 50 images"):
        IdxFileDataset(image_path, few)
    wide = write_idx(str(tmp_path / "wide"), np.zeros((2, 2, 2), np.float32))
    with pytest.raises(Deep500Error, match="reads uint8 .* holds float32"):
        IdxFileDataset(wide)
