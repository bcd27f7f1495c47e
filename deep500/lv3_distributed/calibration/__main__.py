"""``python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl [--quick]
[--quiet]``: the network phases of a calibration, under mpirun (``launch``)."""
import sys

from deep500.lv3_distributed.calibration.launch import main

sys.exit(main())
