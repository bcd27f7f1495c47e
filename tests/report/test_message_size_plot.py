"""Level 3's message-size histogram (Catalán's thesis, Fig. 5.13): each epoch's
``optimizer_measurements["message_sizes"]`` summed over ranks and epochs, drawn as
bars per power-of-two bin, one per scheme; records without one draw nothing."""
import json
from pathlib import Path

from deep500.lv3_distributed.message_sizes import MessageSizeHistogram, bin_label, size_bin
from deep500.report.distributed_records import message_sizes, scheme_label
from deep500.report.level3_plots import _message_sizes
from tests.report.conftest import read_jsonl, svg_legend_texts


def _with_message_sizes(run):
    """The stored run's records with each epoch's messages sent as equal messages of
    bytes_sent / messages_sent (the ring's chunks there), ModelAverageDecentralized's
    with one zero-byte message more; returns the records."""
    path = run / "results.jsonl"
    records = read_jsonl(path)
    for record in records:
        averaging = scheme_label(record).startswith("ModelAverage")
        for ranked in (record["result"]["details"].get("distributed") or {}).get(
                "ranks", []):
            for epoch in ranked["epochs"]:
                measured = epoch["optimizer_measurements"]
                histogram = MessageSizeHistogram()
                messages = measured["messages_sent"]
                histogram.add(measured["bytes_sent"] // messages, messages)
                if averaging:
                    histogram.add(0)
                measured["message_sizes"] = histogram.to_dict()
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


def test_histogram_sums_ranks_and_epochs(distributed_run):
    records = [r for r in _with_message_sizes(distributed_run) if r["rank"] == 0]
    for record in records:
        histogram = message_sizes(record)
        epochs = [e for ranked in record["result"]["details"]["distributed"]["ranks"]
                  for e in ranked["epochs"]]
        sent = sum(e["optimizer_measurements"]["bytes_sent"] for e in epochs)
        messages = sum(e["optimizer_measurements"]["messages_sent"] for e in epochs)
        extra = len(epochs) if scheme_label(record).startswith("ModelAverage") else 0
        assert sum(b for _, b in histogram.values()) == sent
        assert sum(m for m, _ in histogram.values()) == messages + extra
        chunk = epochs[0]["optimizer_measurements"]["bytes_sent"] // \
            epochs[0]["optimizer_measurements"]["messages_sent"]
        assert size_bin(chunk) in histogram


def test_level3_draws_the_histogram_per_scheme(distributed_run, tmp_path):
    records = [r for r in _with_message_sizes(distributed_run) if r["rank"] == 0]
    firsts = {scheme_label(r): r for r in records}   # one seed per scheme
    names = list(firsts)
    figures = _message_sizes(list(firsts.values()), names, str(tmp_path), "svg")
    assert [caption for caption, _ in figures] == [
        "Messages sent per message size, per scheme (power-of-two bins)",
        "Bytes sent per message size, per scheme (power-of-two bins)"]
    for _, path in figures:
        assert svg_legend_texts(Path(path).with_suffix(".svg")) == names
    assert bin_label(0) == "0 B"


def test_records_without_sizes_draw_none(distributed_run, tmp_path):
    records = [r for r in read_jsonl(distributed_run / "results.jsonl") if r["rank"] == 0]
    assert _message_sizes(records, ["a"] * len(records), str(tmp_path), "svg") == []
