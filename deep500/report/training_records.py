"""What the level-2 section and its plots read of a training record: its names (the
executor and the optimizer with its implementation) and its epochs' statistics
(``details.statistics.epochs`` of :func:`deep500.test_training`)."""
from __future__ import annotations


def optimizer_text(record: dict) -> str:
    optimizer = record["configuration"]["optimizer"]
    implementation = optimizer.get("implementation", "native")
    return f"{optimizer['label']} [{implementation}]"


def training_label(record: dict) -> str:
    return f"{record['configuration']['executor']} · {optimizer_text(record)}"


def short_label(record: dict) -> str:
    """For plot legends: the hyper-parameters are in the tables (and are added where
    two series would otherwise share a name)."""
    optimizer = record["configuration"]["optimizer"]
    return (f"{record['configuration']['executor']} · {optimizer['type']} "
            f"[{optimizer.get('implementation', 'native')}]")


def all_epochs(record: dict) -> list[dict]:
    details = record.get("result", {}).get("details", {})
    return list((details.get("statistics") or {}).get("epochs", []))


def completed_epochs(record: dict) -> list[dict]:
    return [e for e in all_epochs(record) if e.get("completed", True)]


def epoch_times(records: list[dict]) -> list[float]:
    """Wall time of every completed epoch of ``records``."""
    return [e["wall_time"] for r in records for e in completed_epochs(r)
            if e.get("wall_time") is not None]
