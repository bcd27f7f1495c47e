"""Import TensorFlow quietly, once, with a clear error if it is missing."""
import os

from deep500.utils.errors import require

# TensorFlow logs start-up chatter at INFO level; keep warnings and errors only.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

tf = require("tensorflow", "tensorflow", "The TensorFlow bridge (deep500.frameworks.tensorflow)")
