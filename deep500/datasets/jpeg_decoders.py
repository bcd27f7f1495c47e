"""JPEG decoders a dataset can read its images with, found by name.

Each decoder turns the bytes of one JPEG file (ITU-T T.81 baseline or progressive, JFIF)
into the same sample: float32 ``channels``×H×W in [0, 1] (``value / 255``), as
:func:`deep500.utils.images.decode_image` does. What differs is the library that
decodes, which is what the dataset latency study compares (Deep500 paper, Fig. 8 and
Table III):

- ``pil``: Pillow (``PIL.Image.open``); the only one that resizes (``image_size``,
  ``crop``) and reads PNG too;
- ``torchvision``: ``torchvision.io.decode_jpeg`` on the CPU;
- ``tensorflow``: ``tf.io.decode_jpeg`` (eager, on the CPU) with the accurate integer
  inverse DCT, so that it returns Pillow's pixels.

The last two need images that already have the dataset's size. All three decode with
libjpeg(-turbo)'s accurate integer IDCT and return the same pixels (the tests check it
to within 1/255 for each decoder that imports).

A decoder whose library cannot be imported says so: ``unavailable()`` returns
``"not available: <reason>"`` and ``decode`` raises a Deep500Error with that text.
"""
from __future__ import annotations

import numpy as np

from deep500.utils.errors import Deep500Error
from deep500.utils.images import MODES, decode_image


class JpegDecoder:
    """Base class: a subclass names itself and its library and writes ``_import`` and
    ``_decode_uint8`` (uint8 H×W×C, or C×H×W with ``channels_first``)."""
    name = ""
    library = ""
    channels_first = False
    remedy = ""  # what to do when the library is installed but cannot be imported

    def __init__(self):
        self._module = None
        self._problem: str | None = None
        self._imported = False

    def _import(self):
        """The library's module (its import may fail: it is what ``unavailable`` reports)."""
        raise NotImplementedError

    def _decode_uint8(self, module, data: bytes, channels: int):
        raise NotImplementedError

    def unavailable(self) -> str | None:
        """``None`` when the decoder can run here, else ``"not available: <reason>"``."""
        if not self._imported:
            self._imported = True
            try:
                self._module = self._import()
            except ModuleNotFoundError as exc:
                missing = (exc.name or self.library).split(".")[0]
                self._problem = (f"not available: {missing} is not installed (pip "
                                 f"install {self.library})")
            except Exception as exc:  # noqa: BLE001 - a broken install raises anything
                self._problem = (f"not available: import {self.library} failed "
                                 f"({type(exc).__name__}: {str(exc).strip()[:300]}); "
                                 f"{self.remedy}")
        return self._problem

    def __getstate__(self):  # a worker process imports the library anew
        return {**self.__dict__, "_module": None, "_problem": None, "_imported": False}

    def decode(self, data: bytes, source: str, size: tuple[int, int] | None = None,
               crop: bool = True, channels: int = 3) -> np.ndarray:
        """float32 ``channels``×H×W in [0, 1] from the bytes of one JPEG; ``source``
        names the file in errors. ``size=(height, width)``: the size every sample must
        have (a decoder that does not resize refuses another)."""
        problem = self.unavailable()
        if problem:
            raise Deep500Error(f"JPEG decoder {self.name!r} is {problem}")
        if channels not in MODES:
            raise Deep500Error(f"channels must be 1 or 3, got {channels}")
        try:
            pixels = np.asarray(self._decode_uint8(self._module, data, channels))
        except Exception as exc:  # noqa: BLE001 - each library raises its own errors
            raise Deep500Error(f"{source}: {self.name} cannot decode the image "
                               f"({type(exc).__name__}: {str(exc).strip()[:200]}); the "
                               f"file is corrupt or not a JPEG") from None
        if not self.channels_first:
            pixels = pixels.transpose(2, 0, 1)
        if size is not None and tuple(pixels.shape[1:]) != tuple(int(s) for s in size):
            raise Deep500Error(f"{source}: the JPEG decoder {self.name} does not resize, "
                               f"and the image is {pixels.shape[1]}×{pixels.shape[2]}, not "
                               f"{size[0]}×{size[1]}; give the dataset image_size=None, or "
                               f"use decoder 'pil'")
        return pixels.astype(np.float32) / np.float32(255)


class PILDecoder(JpegDecoder):
    """Pillow, through :func:`deep500.utils.images.decode_image` (it also resizes)."""
    name, library = "pil", "Pillow"
    remedy = "reinstall Pillow (pip install Pillow)"

    def _import(self):
        import PIL.Image
        return PIL.Image

    def decode(self, data, source, size=None, crop=True, channels=3):
        problem = self.unavailable()
        if problem:
            raise Deep500Error(f"JPEG decoder {self.name!r} is {problem}")
        return decode_image(data, source, size, crop, channels)


class TorchvisionDecoder(JpegDecoder):
    """``torchvision.io.decode_jpeg`` on the CPU (libjpeg-turbo), C×H×W uint8."""
    name, library, channels_first = "torchvision", "torchvision", True
    remedy = ("install the torchvision release built for the installed torch (the same "
              "version, and the same CPU-only or CUDA build)")

    def _import(self):
        import torchvision.io
        return torchvision.io

    def _decode_uint8(self, module, data, channels):
        import torch
        mode = module.ImageReadMode.RGB if channels == 3 else module.ImageReadMode.GRAY
        return module.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8),
                                  mode=mode).numpy()


class TensorFlowDecoder(JpegDecoder):
    """``tf.io.decode_jpeg`` (eager, on the CPU), H×W×C uint8, with the accurate
    integer inverse DCT that Pillow and torchvision use (libjpeg's ``JDCT_ISLOW``), so
    that every decoder delivers the same pixels and only their speed differs.
    TensorFlow's own default, ``INTEGER_FAST``, is off by up to 7/255 per pixel; give
    ``dct_method="INTEGER_FAST"`` (or ``""``) to time that."""
    name, library = "tensorflow", "tensorflow"

    def __init__(self, dct_method: str = "INTEGER_ACCURATE"):
        super().__init__()
        self.dct_method = dct_method
    remedy = "reinstall TensorFlow as pinned in constraints.txt (tensorflow-cpu)"

    def _import(self):
        from deep500.utils.tensorflow_import import import_tensorflow
        return import_tensorflow()

    def _decode_uint8(self, module, data, channels):
        with module.device("/CPU:0"):
            return module.io.decode_jpeg(data, channels=channels,
                                         dct_method=self.dct_method).numpy()


JPEG_DECODERS = {cls.name: cls for cls in (PILDecoder, TorchvisionDecoder,
                                           TensorFlowDecoder)}
_SHARED: dict[str, JpegDecoder] = {}


def jpeg_decoder_names() -> list[str]:
    return list(JPEG_DECODERS)


def jpeg_decoder(name: str | JpegDecoder) -> JpegDecoder:
    """The decoder called ``name`` (one instance per name, so a library is imported,
    or found missing, once); a decoder passed in is returned as it is."""
    if isinstance(name, JpegDecoder):
        return name
    if name not in JPEG_DECODERS:
        raise Deep500Error(f"unknown JPEG decoder {name!r}; known: {jpeg_decoder_names()}")
    if name not in _SHARED:
        _SHARED[name] = JPEG_DECODERS[name]()
    return _SHARED[name]
