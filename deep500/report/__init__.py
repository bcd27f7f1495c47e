"""Reports: Markdown and HTML views over a run's results.

``write_reports`` is imported on first use (PEP 562): modules that only read records
(``deep500.report.records``, imported by every rank of a recipe run) do not load every
level's report and its plots."""

__all__ = ["write_reports"]


def __getattr__(name: str):
    if name == "write_reports":
        from deep500.report.render import write_reports
        return write_reports
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
