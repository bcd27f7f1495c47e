"""The report links every configuration's timeline files (issue 31, item 7: timelines
were not linked from the report)."""
from deep500.report.tables import Links
from deep500.report.timeline_links import timeline_links, timelines_table


def record(index, summary):
    metrics = [{"metric": "TestAccuracy", "summary": {}}]
    if summary is not None:
        metrics.append({"metric": "Timeline", "summary": summary})
    return {"index": index, "result": {"metrics": metrics}}


TWO_RANKS = {"path": "/old/place/timeline/0003-reference.json",
             "rank_paths": ["/old/place/timeline/0003-reference-rank0.json",
                            "/old/place/timeline/0003-reference-rank1.json"]}


def test_every_rank_and_each_rank_are_linked_inside_the_run_folder():
    links = timeline_links(TWO_RANKS)
    assert links.items == (("all ranks", "timeline/0003-reference.json"),
                           ("rank 0", "timeline/0003-reference-rank0.json"),
                           ("rank 1", "timeline/0003-reference-rank1.json"))
    one_rank = {"path": "/r/timeline/0001-x-rank0.json",
                "rank_paths": ["/r/timeline/0001-x-rank0.json"]}
    assert timeline_links(one_rank).items == (("rank 0", "timeline/0001-x-rank0.json"),)


def test_the_table_has_a_row_per_configuration_with_a_timeline_in_both_formats():
    table = timelines_table([record(3, TWO_RANKS), record(4, None)], ["Scheme"],
                            lambda r: [f"scheme {r['index']}"])
    assert [row[0] for row in table.rows] == ["scheme 3"]
    assert isinstance(table.rows[0][1], Links)
    assert "| scheme 3 | [all ranks](timeline/0003-reference.json) [rank 0](timeline/" \
           "0003-reference-rank0.json)" in table.markdown()
    html = table.html()
    assert "<a href='timeline/0003-reference-rank1.json'>rank 1</a>" in html
    assert "&lt;a" not in html  # the links are not escaped as text
