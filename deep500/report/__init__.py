"""Reports: Markdown and HTML views over a run's results."""
from deep500.report.render import write_reports

__all__ = ["write_reports"]
