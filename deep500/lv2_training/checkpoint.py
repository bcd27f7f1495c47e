"""Training checkpoints: one file holding everything a resumed run needs to continue
the trajectory of an uninterrupted one exactly.

A checkpoint is a NumPy ``.npz`` archive (no pickles) of

* the network's stored tensors by ONNX name, fetched with ``network.fetch_tensor``:
  its parameters (``network.get_params()``) and the other tensors it stores (constants,
  batch-normalisation running statistics: the initializers that are not parameters),
  in the ONNX layout, so that a checkpoint of one framework restores into another;
* a JSON document (the array ``__deep500__``) with a caller's nested state, e.g. the
  optimizer's and samplers' ``state_dict()``, the trainer's epoch and statistics.
  NumPy arrays and scalars inside that state are stored as arrays of the archive and
  come back with their dtype; tuples come back as lists.

Files are written atomically (a temporary file, then ``os.replace``): a crash while
saving leaves the previous checkpoint intact.
"""
from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass

import numpy as np

from deep500.lv1_network.network import Network
from deep500.utils.errors import Deep500Error
from deep500.utils.storage_errors import storage_errors_named

FORMAT = "deep500-training-checkpoint"
VERSION = 1
_META = "__deep500__"


@dataclass
class CheckpointData:
    """A checkpoint read from disk: ``parameters`` and ``tensors`` (other stored
    tensors) by ONNX name, and the caller's ``state``."""
    path: str
    network: str
    parameters: dict
    tensors: dict
    state: dict


def stored_tensor_names(network: Network) -> list[str]:
    """Names of the tensors ``network`` stores besides its parameters (constants and
    non-trainable initializers such as batch-normalisation running statistics).

    Networks expose them differently: the reference network as ``persistent_tensors``,
    the PyTorch network as ``initializers``, the TensorFlow network as ``variables`` and
    ``constants``. Other networks are assumed to store only their parameters.
    """
    params = set(network.get_params())
    names: list[str] = []
    for attribute in ("persistent_tensors", "initializers", "variables", "constants"):
        stored = getattr(network, attribute, None)
        if isinstance(stored, dict):
            names += [n for n in stored if n not in params and n not in names]
    return names


# -- writing ---------------------------------------------------------------------------
def save_checkpoint(path: str, network: Network, state: dict | None = None) -> str:
    """Write the network's stored tensors and ``state`` to ``path`` (created with its
    folder; replaced atomically if it exists). Returns the path."""
    path = os.fspath(path)
    arrays: dict[str, np.ndarray] = {}
    parameters = _fetch(network, network.get_params(), arrays, "p")
    tensors = _fetch(network, stored_tensor_names(network), arrays, "t")
    meta = {"format": FORMAT, "version": VERSION, "network": network.name,
            "parameters": parameters, "tensors": tensors,
            "state": _encode(state or {}, arrays, "state")}
    arrays[_META] = np.array(json.dumps(meta))
    folder = os.path.dirname(os.path.abspath(path))
    temporary = f"{path}.tmp{os.getpid()}"
    with storage_errors_named(path):
        os.makedirs(folder, exist_ok=True)
        try:
            with open(temporary, "wb") as handle:
                np.savez(handle, **arrays)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, path)
        finally:
            if os.path.exists(temporary):
                os.remove(temporary)
    return path


def _fetch(network: Network, names: list[str], arrays: dict, prefix: str) -> dict:
    """Copies the tensors into ``arrays`` under short keys; returns {name: key}."""
    keys = {}
    for index, name in enumerate(names):
        key = f"{prefix}{index}"
        arrays[key] = np.array(network.fetch_tensor(name), copy=True)
        keys[name] = key
    return keys


def _encode(value, arrays: dict, where: str):
    """JSON-able form of a nested state; arrays and NumPy scalars go to ``arrays``."""
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise Deep500Error(f"Cannot store {where} in a checkpoint: object arrays are "
                               f"not allowed (no pickles); use numeric arrays")
        key = f"s{len(arrays)}"
        arrays[key] = np.array(array, copy=True)
        return {"__array__" if isinstance(value, np.ndarray) else "__scalar__": key}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            if any(k in ("__array__", "__scalar__", "__items__") for k in value):
                raise Deep500Error(f"Cannot store {where}: its keys {sorted(value)} use "
                                   f"names reserved by the checkpoint format")
            return {k: _encode(v, arrays, f"{where}.{k}") for k, v in value.items()}
        return {"__items__": [[_encode(k, arrays, where), _encode(v, arrays, f"{where}[{k!r}]")]
                              for k, v in value.items()]}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise Deep500Error(f"Cannot store {where} in a checkpoint: values of type "
                       f"{type(value).__name__} are not supported (use NumPy arrays, "
                       f"numbers, strings, lists and dicts)")


def _decode(value, arrays):
    if isinstance(value, dict):
        if set(value) == {"__array__"}:
            return np.array(arrays[value["__array__"]])
        if set(value) == {"__scalar__"}:
            return arrays[value["__scalar__"]][()]
        if set(value) == {"__items__"}:
            return {_freeze(_decode(k, arrays)): _decode(v, arrays)
                    for k, v in value["__items__"]}
        return {k: _decode(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, arrays) for v in value]
    return value


def _freeze(key):
    return tuple(_freeze(k) for k in key) if isinstance(key, list) else key


# -- reading ---------------------------------------------------------------------------
def read_checkpoint(path: str) -> CheckpointData:
    """Read a checkpoint; a missing, damaged or foreign file raises Deep500Error."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        hint = (" (it is a folder: pass a checkpoint file, e.g. "
                "Checkpoint.latest(folder))" if os.path.isdir(path) else "")
        raise Deep500Error(f"Checkpoint {path!r} does not exist{hint}")
    try:
        with np.load(path, allow_pickle=False) as archive:
            if _META not in archive.files:
                raise Deep500Error(f"{path} is a NumPy archive but not a Deep500 training "
                                   f"checkpoint (it has no {_META!r} entry)")
            meta = json.loads(str(archive[_META][()]))
            if meta.get("format") != FORMAT:
                raise Deep500Error(f"{path} is not a Deep500 training checkpoint "
                                   f"(format {meta.get('format')!r})")
            if int(meta.get("version", 0)) > VERSION:
                raise Deep500Error(f"{path} was written by a newer Deep500 (checkpoint "
                                   f"version {meta['version']}; this one reads up to "
                                   f"{VERSION}); upgrade deep500")
            arrays = {k: archive[k] for k in archive.files if k != _META}
    except Deep500Error:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile,
            json.JSONDecodeError) as exc:
        raise Deep500Error(f"Checkpoint {path} is damaged or not a checkpoint "
                           f"({type(exc).__name__}: {exc}); use an earlier checkpoint"
                           ) from None
    try:
        return CheckpointData(path, meta.get("network", "?"),
                              {n: arrays[k] for n, k in meta["parameters"].items()},
                              {n: arrays[k] for n, k in meta["tensors"].items()},
                              _decode(meta["state"], arrays))
    except (KeyError, TypeError, AttributeError) as exc:
        raise Deep500Error(f"Checkpoint {path} is damaged: entry {exc} is missing; use an "
                           f"earlier checkpoint") from None


def check_compatible(checkpoint: CheckpointData, network: Network) -> None:
    """Raise Deep500Error unless the checkpoint's parameters (names, shapes, dtypes) and
    stored tensors fit ``network``, naming every difference."""
    problems = []
    params = network.get_params()
    missing = [p for p in params if p not in checkpoint.parameters]
    extra = [p for p in checkpoint.parameters if p not in params]
    if missing:
        problems.append(f"parameters missing from the checkpoint: {_names(missing)}")
    if extra:
        problems.append(f"parameters the network does not have: {_names(extra)}")
    stored = set(stored_tensor_names(network)) | set(params)
    unknown = [t for t in checkpoint.tensors if t not in stored]
    if unknown:
        problems.append(f"stored tensors the network does not have: {_names(unknown)}")
    for name, value in list(checkpoint.parameters.items()) + list(checkpoint.tensors.items()):
        if name not in stored or name in extra:
            continue
        current = np.asarray(network.fetch_tensor(name))
        if current.shape != value.shape or current.dtype != value.dtype:
            problems.append(f"{name!r} is {value.dtype}{list(value.shape)} in the "
                            f"checkpoint but {current.dtype}{list(current.shape)} in the "
                            f"network")
    if problems:
        raise Deep500Error(f"Checkpoint {checkpoint.path} (network "
                           f"'{checkpoint.network}') does not fit network '{network.name}': "
                           + "; ".join(problems[:8])
                           + ("; ..." if len(problems) > 8 else "")
                           + ". Was it saved from a different model?")


def _names(names: list) -> str:
    return ", ".join(repr(n) for n in names[:6]) + (", ..." if len(names) > 6 else "")


def restore_network(checkpoint: CheckpointData, network: Network) -> None:
    """Feed the checkpoint's tensors into ``network`` (after :func:`check_compatible`).

    Stored tensors other than parameters are fed only where their value changed
    (feeding a constant makes some frameworks rebuild their graph); parameters are fed
    last, so such a rebuild cannot undo them.
    """
    check_compatible(checkpoint, network)
    for name, value in checkpoint.tensors.items():
        current = np.asarray(network.fetch_tensor(name))
        if not np.array_equal(current, value, equal_nan=value.dtype.kind in "fc"):
            network.feed_tensor(name, value, is_param=False)
    for name, value in checkpoint.parameters.items():
        network.feed_tensor(name, value, is_param=True)
