"""The results store: every run in an embedded SQLite database (:mod:`.database`),
compared run against run (:mod:`.compare`), followed across git revisions
(:mod:`.history`), and training runs as MLPerf-style logs (:mod:`.mlperf_log`).
See ``docs/results_store.md``."""
from deep500.store.database import (Database, StoreError, default_path, store_run,
                                    store_run_or_warn)

__all__ = ["Database", "StoreError", "default_path", "store_run", "store_run_or_warn"]
