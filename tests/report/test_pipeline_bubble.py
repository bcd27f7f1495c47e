"""The Level-3 report's pipeline table: one row per pipeline record, medians over
epochs of the bubble measured, by formula and modelled, and of the step measured
against modelled."""
from deep500.report.pipeline_bubble import pipeline_table


def record(rank=0, bubbles=None):
    return {"rank": rank, "configuration": {"scheme": "p"}, "result": {"details": {
        "pipeline": {"stages": 2, "data_parallel": 1, "microbatches": 4,
                     "schedule": "gpipe", "stage_nodes": [["a", "b"], ["c"]],
                     "bubble_per_epoch": bubbles}}}}


def test_a_row_per_pipeline_with_medians_over_epochs():
    epochs = [None] + [{"measured": m, "gpipe_formula": 0.2, "modelled": 0.25,
                        "step_seconds": s, "modelled_step_seconds": 0.01}
                       for m, s in ((0.3, 0.02), (0.4, 0.03), (0.5, 0.05))]
    records = [record(bubbles=epochs), record(rank=1, bubbles=epochs),
               {"rank": 0, "configuration": {"scheme": "ConsistentDecentralized"},
                "result": {"details": {}}}]
    table = pipeline_table(records, ["Scheme"], lambda r: [r["configuration"]["scheme"]])
    assert table.rows == [["p", "2 x 1", 4, "gpipe", "2, 1", "40.0%", "20.0%", "25.0%",
                           "30 ms", "10 ms", "3.00"]]


def test_a_pipeline_without_a_measured_epoch_says_not_available():
    table = pipeline_table([record(bubbles=[None])], [], lambda r: [])
    assert table.rows[0][4:] == ["n/a"] * 6
