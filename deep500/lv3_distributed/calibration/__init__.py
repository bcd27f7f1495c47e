"""``deep500 calibrate``: measure this machine and write a machine file
(``deep500.utils.machine``). One file per job:

* ``plan``: the sizes, repeats and time budgets of a calibration (``quick`` or full);
* ``point_to_point``: **ping-pong** between ranks 0 and 1 (``MPI_Send``/``MPI_Recv`` of
  1 B … 64 MB, powers of two; one-way time = round trip / 2), and **exchange**, both
  ranks ``Sendrecv`` n bytes at once: the textbook costs assume a full-duplex link,
  where an exchange costs what a one-way message does; between two processes on one
  host both directions are copies by the same CPUs and memory, and an exchange is
  slower, so the models price ``Sendrecv`` steps with this fit;
* ``hockney``: the piecewise Hockney fit t(n) = α + β·n of their medians and the
  ``network`` section;
* ``coherence``: δ_sum and δ_receive, what summing or receiving into a buffer costs
  more per byte when the peer's receive has just read it, at 64 KB … 64 MB;
* ``software``: with two ranks or more, the per-call overhead o of every allreduce
  algorithm (a 4-byte allreduce minus its α-β-γ prediction on the machine just
  fitted), every algorithm's allreduce *in context* (between compute bursts, no
  barrier) and its ratio to that model, and the cost of the fusion copy
  (``FusedBuffer.pack``);
* ``compute``: γ (``numpy.add`` in place at 64 KB … 64 MB), the memory bandwidth (a
  STREAM-like triad) and the peak GEMM and convolution FLOP/s per thread count;
* ``network_phases``: the phases that need MPI, run in one world, and read back from the
  samples file; ``samples``: that file (one JSON line per measurement, written as
  measured) and the median summaries; ``progress``: the progress bars;
* ``machine_file``: ``calibrate``, every phase into the machine file; ``launch``:
  ``run_calibration``, which starts ``mpirun`` for the network phases when needed
  (``python -m deep500.lv3_distributed.calibration pingpong SAMPLES.jsonl``).
"""
from deep500.lv3_distributed.calibration.compute import (measure_conv, measure_gamma,
                                                         measure_gemm, measure_triad,
                                                         reduction_section)
from deep500.lv3_distributed.calibration.hockney import fit_hockney, network_section
from deep500.lv3_distributed.calibration.launch import run_calibration
from deep500.lv3_distributed.calibration.machine_file import calibrate
from deep500.lv3_distributed.calibration.network_phases import (NetworkSamples,
                                                                measure_network,
                                                                read_network_samples)
from deep500.lv3_distributed.calibration.plan import Plan
from deep500.lv3_distributed.calibration.point_to_point import pingpong
from deep500.lv3_distributed.calibration.samples import (SampleLog, read_pingpong_samples,
                                                         read_sample_records,
                                                         samples_path_for)

__all__ = ["Plan", "calibrate", "run_calibration", "pingpong", "fit_hockney",
           "network_section", "reduction_section", "measure_gamma", "measure_triad",
           "measure_gemm", "measure_conv", "NetworkSamples", "measure_network",
           "read_network_samples", "SampleLog", "samples_path_for", "read_sample_records",
           "read_pingpong_samples"]
