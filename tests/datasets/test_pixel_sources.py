"""The 8-bit pixel sources of the dataset latency study."""
import numpy as np

from deep500.datasets.pixel_sources import IMAGE_COUNTS, PIXEL_SOURCES, pixel_source


def test_pixel_sources_are_contiguous_uint8_rows():
    for name in PIXEL_SOURCES:
        images, labels = pixel_source(name)
        assert images.dtype == np.uint8 and images.flags["C_CONTIGUOUS"], name
        assert len(images) == len(labels) == IMAGE_COUNTS[name]
        assert labels.dtype == np.int64 and set(np.unique(labels)) == set(range(10))
