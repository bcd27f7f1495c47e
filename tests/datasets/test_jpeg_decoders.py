"""JPEG decoders: each returns Pillow's pixels, a missing library says so, and the tar
dataset decodes with the decoder it is given."""
import io
import sys

import numpy as np
import pytest

from deep500.datasets import IndexedTarDataset
from deep500.datasets import jpeg_decoders
from deep500.datasets.format_writers import jpeg_bytes, write_jpeg_tar
from deep500.datasets.jpeg_decoders import (JPEG_DECODERS, TorchvisionDecoder,
                                            jpeg_decoder)
from deep500.datasets.pixel_sources import cifar_shaped_pixels, digits_pixels
from deep500.utils.errors import Deep500Error

# The decoders share libjpeg(-turbo)'s accurate integer IDCT: equal pixels, allowing one
# level of rounding between library builds.
SAME_PIXELS = 1 / 255
# JPEG at quality 90 against the pixels it was written from: the mean error of these
# smooth test images (Pillow measured 2.8/255 on the digits, 8.8/255 on the noisier
# CIFAR-shaped ones; a decoder that mixed up channels or rows is off by ~60/255).
JPEG_MEAN_ERROR = 12 / 255


def _images():
    colour, _ = cifar_shaped_pixels(images=4)
    gray = digits_pixels()[0][:4]
    return [("rgb 32x32", colour), ("gray 8x8", gray)]


def _decoder_or_skip(name):
    decoder = jpeg_decoder(name)
    problem = decoder.unavailable()
    if problem:
        pytest.skip(f"{name}: {problem}")
    return decoder


@pytest.mark.parametrize("name", list(JPEG_DECODERS))
def test_each_decoder_returns_pillows_pixels(name):
    decoder, pil = _decoder_or_skip(name), jpeg_decoder("pil")
    for kind, images in _images():
        for image in images:
            data = jpeg_bytes(image, quality=90)
            channels = image.shape[0]
            decoded = decoder.decode(data, kind, channels=channels)
            assert decoded.dtype == np.float32 and decoded.shape == image.shape
            reference = pil.decode(data, kind, channels=channels)
            np.testing.assert_allclose(decoded, reference, rtol=0, atol=SAME_PIXELS + 1e-6)
            assert np.abs(decoded - image / 255).mean() <= JPEG_MEAN_ERROR, kind


def test_a_missing_library_says_not_available(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)   # import raises ImportError
    monkeypatch.setitem(sys.modules, "torchvision.io", None)
    decoder = TorchvisionDecoder()
    problem = decoder.unavailable()
    assert problem.startswith("not available: torchvision is not installed")
    with pytest.raises(Deep500Error, match="'torchvision' is not available: torchvision "
                                           "is not installed"):
        decoder.decode(jpeg_bytes(digits_pixels()[0][0]), "x", channels=1)


def test_a_broken_install_names_the_error(monkeypatch):
    def broken(self):
        raise RuntimeError("operator torchvision::nms does not exist")
    monkeypatch.setattr(TorchvisionDecoder, "_import", broken)
    problem = TorchvisionDecoder().unavailable()
    assert problem.startswith("not available: import torchvision failed (RuntimeError: "
                              "operator torchvision::nms does not exist)")
    assert "built for the installed torch" in problem


def test_unknown_decoder_and_a_size_it_cannot_make(tmp_path):
    with pytest.raises(Deep500Error, match="unknown JPEG decoder 'libjpeg'; known: "):
        jpeg_decoder("libjpeg")
    images, labels = digits_pixels()
    archive = write_jpeg_tar(str(tmp_path / "d.tar"), images[:6], labels[:6])
    dataset = IndexedTarDataset(archive, image_size=(16, 16), channels=1,
                                decoder=_PilAsFixedSize())
    with pytest.raises(Deep500Error, match="does not resize, and the image is 8×8, not "
                                           "16×16; give the dataset image_size=None"):
        dataset[0]


class _PilAsFixedSize(jpeg_decoders.JpegDecoder):
    """A decoder that does not resize (as torchvision and TensorFlow), built on Pillow
    so that the test runs where neither is installed."""
    name, library = "pil-fixed-size", "Pillow"

    def _import(self):
        import PIL.Image
        return PIL.Image

    def _decode_uint8(self, module, data, channels):
        with module.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("L" if channels == 1 else "RGB"))
        return pixels[..., None] if channels == 1 else pixels


def test_tar_of_jpegs_serves_the_written_images_in_order(tmp_path):
    images, labels = digits_pixels()
    archive = write_jpeg_tar(str(tmp_path / "d.tar"), images[:40], labels[:40])
    dataset = IndexedTarDataset(archive, image_size=None, channels=1)
    assert len(dataset) == 40 and dataset.sample_shape == (1, 8, 8)
    batch = dataset[np.arange(40)]
    np.testing.assert_array_equal(batch["labels"], labels[:40])
    assert np.abs(batch["input"] - images[:40] / 255).mean() <= JPEG_MEAN_ERROR


def test_a_decoder_pickles_for_worker_processes():
    import pickle
    decoder = jpeg_decoder("pil")
    assert decoder.unavailable() is None
    copy = pickle.loads(pickle.dumps(decoder))
    data = jpeg_bytes(digits_pixels()[0][0])
    np.testing.assert_array_equal(copy.decode(data, "x", channels=1),
                                  decoder.decode(data, "x", channels=1))
