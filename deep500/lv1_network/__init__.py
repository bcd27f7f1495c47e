"""Level 1: networks and graph executors (built from ONNX). Not implemented yet."""
