"""What the smoke tests check of every benchmark's start: its expected run time, said
before it measures (benchmarks/benchmark_targets.py, expected_run_time)."""


def says_expected_run_time_first(out: str, lines: int = 3) -> bool:
    """Whether one of the first ``lines`` lines of ``out`` is the expected-run-time
    line (a platform or 'PyTorch not installed' line may come before it)."""
    return any(line.startswith("Expected run time: about ")
               for line in out.splitlines()[:lines])
