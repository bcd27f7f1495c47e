"""Image decoding for the dataset loaders. It lives in :mod:`deep500.utils.images`, below
the levels, because level 2's file loader (``FileListDataset``) decodes images too and
a level may not import ``deep500.datasets``; this module names it for the loaders."""
from deep500.utils.images import MODES, decode_image, stack_samples

__all__ = ["MODES", "decode_image", "stack_samples"]
