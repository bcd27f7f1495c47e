"""Import TensorFlow quietly, once, with a clear error if it is missing."""
from deep500.utils.errors import MissingDependencyError
from deep500.utils.tensorflow_import import import_tensorflow

try:
    tf = import_tensorflow()
except ImportError as exc:
    raise MissingDependencyError("tensorflow", "tensorflow", "The TensorFlow bridge "
                                 "(deep500.frameworks.tensorflow)") from exc
