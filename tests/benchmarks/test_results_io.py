"""benchmarks/results_io.write_results: a rerun rewrites the report and keeps the person's "## Reading" below it."""
from benchmarks.results_io import write_results


def test_a_rerun_rewrites_the_report_and_keeps_the_reading_once(tmp_path):
    results = str(tmp_path / "bench")
    write_results({"x": 1}, results, lambda r: f"# Bench\n\nx = {r['x']}\n")
    with open(results + ".md", "a") as f:
        f.write("\n## Reading (a date)\n- x is small.\n\n## More\n- kept too.\n")
    write_results({"x": 2}, results, lambda r: f"# Bench\n\nx = {r['x']}\n")
    write_results({"x": 3}, results, lambda r: f"# Bench\n\nx = {r['x']}\n")
    text = (tmp_path / "bench.md").read_text()
    assert text == "# Bench\n\nx = 3\n\n## Reading (a date)\n- x is small.\n\n## More\n- kept too.\n"
