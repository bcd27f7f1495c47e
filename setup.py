"""Deep500: a white-box benchmarking meta-framework for deep learning."""
from setuptools import find_packages, setup

FRAMEWORKS = ["torch==2.13.0", "tensorflow-cpu>=2.20"]
MPI = ["mpi4py>=4.0", "mpich"]
ONNXRUNTIME = ["onnxruntime"]
PLOT = ["matplotlib"]
# The embedded digits dataset (scikit-learn) and JPEG decoding for tar datasets (Pillow).
DATASETS = ["scikit-learn", "Pillow"]
TESTS = ["pytest", "onnxscript", "tf2onnx"]
# MLPerf logs written by MLCommons' mllog and checked by its compliance checker.
MLPERF = ["mlperf-logging"]

setup(
    name="deep500",
    version="0.1.0",
    description="A white-box benchmarking meta-framework for deep learning",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["deep500", "deep500.*"]),
    # The C++ operator header ships with the package: compile_custom_cppop includes it.
    package_data={"deep500": ["data/*.csv", "data/*.md", "data/machines/*.yaml",
                              "lv0_operators/include/deep500/*.h",
                              "frameworks/tensorflow/kernel/*.cc",
                              "frameworks/pytorch/native/*.cpp",
                              "lv3_distributed/kernels/*.cpp",
                              "lv3_distributed/kernels/*.h"]},
    install_requires=[
        "numpy>=1.24",
        "onnx>=1.15",
        "networkx>=3.0",
        "pyyaml>=6.0",
        "threadpoolctl>=3.1",
        "tqdm>=4.60",
        # C++ operators: CMake as a wheel (no system CMake needed) and a lock file that
        # keeps concurrent builds (every rank under mpirun) from racing.
        "cmake>=3.15",
        "filelock>=3.0",
        # Telemetry during measurements (other processes' CPU time, load, frequency).
        "psutil>=5.9",
        # The typed layer of recipe checking: every error at once, with its key path.
        "pydantic>=2.0",
    ],
    extras_require={
        "frameworks": FRAMEWORKS,
        "pytorch": FRAMEWORKS[:1],
        "tensorflow": FRAMEWORKS[1:],
        "mpi": MPI,
        "onnxruntime": ONNXRUNTIME,
        "plot": PLOT,
        "datasets": DATASETS,
        "tests": TESTS,
        "mlperf": MLPERF,
        "all": FRAMEWORKS + MPI + ONNXRUNTIME + PLOT + DATASETS + TESTS + MLPERF,
    },
    # No pytest11 entry point for the d5bench plugin: pytest would then rewrite the
    # asserts of every deep500 module in every session of the environment (and
    # 'python -m deep500' through runpy fails under that import hook). Enable it with
    # 'pytest -p deep500.store.pytest_plugin' (docs/results_store.md).
    entry_points={"console_scripts": ["deep500=deep500.cli:main"]},
)
