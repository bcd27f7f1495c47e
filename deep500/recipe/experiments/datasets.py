"""The dataset latency study (``experiment: datasets``): how long one minibatch takes
to come out of a sampler, per dataset × storage × order × JPEG decoder (Deep500
paper, Fig. 8 and Table III).

The same 8-bit images (:mod:`deep500.datasets.pixel_sources`: ``digits``, or the
generated ``cifar-shaped`` set) are stored, once per run, inside the run folder
(``dataset_files/``) and served by one of four storages:

=========== ============================================================================
storage     what a minibatch costs
=========== ============================================================================
memory      uint8 arrays in memory, gathered and scaled to float32 (``ByteImageDataset``)
idx         an IDX file read on every access, one ``pread`` per run of consecutive
            samples (``IdxFileDataset``)
jpeg-tar    an uncompressed tar of JPEGs (quality ``jpeg_quality``), one ``pread`` and
            one decode per sample by ``decoder`` (``IndexedTarDataset``)
synthetic   seeded uniform random samples of the same shape, generated per sample
            (``SyntheticDataset``): no storage at all
=========== ============================================================================

Every storage yields the same minibatch: float32 N×C×H×W in [0, 1] and int64 labels.
``order`` draws it in file order (``sequential``: ``d5.OrderedSampler``) or from a
seeded permutation per epoch (``shuffled``: ``d5.ShuffleSampler``). ``DatasetLatency``
times each ``next(sampler)`` (warm-up draws left out) and reports the median with its
nonparametric 95% CI; ``batches`` draws are timed, epochs restart as needed.

A decoder applies only to ``jpeg-tar``: the other storages are measured in their
configuration with decoder ``pil`` and skipped in the others. A decoder whose library
cannot be imported here is skipped with ``not available: <reason>``. The files were
just written, so reads are served by the page cache: a cold cache is not measured.
"""
from __future__ import annotations

import os

from deep500.datasets.jpeg_decoders import jpeg_decoder, jpeg_decoder_names
from deep500.datasets.pixel_sources import IMAGE_COUNTS, PIXEL_SOURCES, pixel_source
from deep500.recipe.experiments import base
from deep500.recipe.problems import describe
from deep500.utils.errors import RecipeError

STORAGES = ("memory", "idx", "jpeg-tar", "synthetic")
ORDERS = {"sequential": "OrderedSampler", "shuffled": "ShuffleSampler"}
#: The decoder the storages without JPEGs are measured with (it is not used by them).
PLAIN_DECODER = "pil"
FOLDER = "dataset_files"


def _quality(value, where, recipe_dir=None):
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 95:
        raise RecipeError(f"{where}: a JPEG quality is an integer from 1 to 95 (Pillow's "
                          f"useful range), got {describe(value)}")
    return value


class DatasetsExperiment(base.Experiment):
    name = "datasets"
    level = 2
    components = {
        "dataset": (base.one_of(tuple(PIXEL_SOURCES)), base.REQUIRED),
        "storage": (base.one_of(STORAGES), base.REQUIRED),
        "order": (base.one_of(tuple(ORDERS)), "shuffled"),
        "decoder": (base.one_of(tuple(jpeg_decoder_names())), PLAIN_DECODER),
        "batch_size": (base.positive_int, 128),
        "batches": (base.positive_int, 30),          # timed draws, after the warm-up
        "jpeg_quality": (_quality, 90),
        "threads": base.CONDITIONS["threads"],
        "seed": base.CONDITIONS["seed"],
    }
    input_components = ("dataset", "seed", "jpeg_quality", "storage")
    metric_names = ("DatasetLatency",)
    default_metrics = ("DatasetLatency",)

    def check(self, recipe, problems) -> None:
        storages = recipe.alternatives("storage")
        if any(s != "jpeg-tar" for s in storages) and \
                PLAIN_DECODER not in recipe.alternatives("decoder"):
            at = "mutable.decoder" if "decoder" in recipe.mutable else "fixed.decoder"
            problems.add(at, f"storages {[s for s in storages if s != 'jpeg-tar']} read "
                             f"no JPEGs and are measured once, in their configuration "
                             f"with decoder {PLAIN_DECODER}; add {PLAIN_DECODER} to the "
                             f"decoders")
        for dpath, name in recipe.located("dataset"):
            images = IMAGE_COUNTS[name]
            for bpath, batch in recipe.located("batch_size"):
                if batch > images:
                    problems.add(bpath, f"batch_size {batch} is larger than dataset {name} "
                                        f"({images} images, {dpath})")

    def applicable(self, configuration) -> str | None:
        """Why a configuration is not measured: a decoder on a storage without JPEGs,
        or a decoder whose library is not available here."""
        storage, decoder = configuration["storage"], configuration["decoder"]
        if storage != "jpeg-tar":
            if decoder != PLAIN_DECODER:
                return (f"decoders apply only to jpeg-tar; storage {storage} is measured "
                        f"in its configuration with decoder {PLAIN_DECODER}")
            return None
        return jpeg_decoder(decoder).unavailable()

    def measure(self, recipe, configuration, tag, output_dir, state):
        import deep500 as d5
        dataset, files = _stored_dataset(configuration, output_dir, state)
        sampler = getattr(d5, ORDERS[configuration["order"]])(
            dataset, configuration["batch_size"], seed=configuration["seed"])
        metrics = recipe.build_metrics(output_dir, tag)
        warmup = max((getattr(m, "warmup", 0) for m in metrics), default=0)
        result = d5.test_sampler(sampler, metrics, batches=warmup + configuration["batches"])
        result.outputs = None  # the last minibatch: not kept
        result.details["storage"] = {
            "dataset": dataset.name, "images": len(dataset),
            "sample_shape": list(dataset.sample_shape),
            "files": {os.path.relpath(p, output_dir): os.path.getsize(p) for p in files}}
        return result

    def describe(self, configuration):
        """The configuration, with no decoder where the storage holds no JPEGs."""
        described = dict(configuration)
        if configuration["storage"] != "jpeg-tar":
            described["decoder"] = None
        return described


def _stored_dataset(configuration: dict, output_dir: str, state: dict):
    """(the configuration's dataset in its storage, the files it reads). The files of
    one dataset are written once per run, into ``<run>/dataset_files/``."""
    from deep500.datasets import ByteImageDataset, IndexedTarDataset
    from deep500.datasets.format_writers import write_idx, write_jpeg_tar
    from deep500.datasets.idx_file import IdxFileDataset
    from deep500.lv2_training import SyntheticDataset
    name, seed = configuration["dataset"], configuration["seed"]
    key = (name, seed)
    if state.get("pixels_key") != key:
        state.update(pixels_key=key, pixels=pixel_source(name, seed), files={})
    images, labels = state["pixels"]
    storage, label = configuration["storage"], f"{name} ({configuration['storage']})"
    folder = os.path.join(output_dir, FOLDER, f"{name}-seed{seed}")
    files = state["files"]
    if storage == "memory":
        return ByteImageDataset(images, labels, classes=10, name=label), []
    if storage == "synthetic":
        return SyntheticDataset(images.shape[1:], 10, len(images), seed,
                                   distribution="uniform", name=label), []
    os.makedirs(folder, exist_ok=True)
    if storage == "idx":
        if "idx" not in files:
            files["idx"] = (write_idx(os.path.join(folder, "images-idx4-ubyte"), images),
                            write_idx(os.path.join(folder, "labels-idx1-ubyte"),
                                      labels.astype("uint8")))
        return IdxFileDataset(*files["idx"], classes=10, name=label), list(files["idx"])
    quality = configuration["jpeg_quality"]
    if ("tar", quality) not in files:
        files["tar", quality] = write_jpeg_tar(
            os.path.join(folder, f"images-q{quality}.tar"), images, labels, quality)
    archive = files["tar", quality]
    dataset = IndexedTarDataset(archive, image_size=None, channels=images.shape[1],
                                   decoder=configuration["decoder"],
                                   name=f"{label}, {configuration['decoder']}")
    return dataset, [archive, archive + ".index.npz"]
