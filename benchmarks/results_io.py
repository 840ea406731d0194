"""Writing a benchmark's result: RESULTS.json (the data) and RESULTS.md (its report), and printing the report."""
import json
import os


READING = "## Reading"  # a results file's hand-written section, from this heading to the end: kept across reruns


def kept_reading(md_path: str) -> str:
    """The hand-written part of a results file (from its first READING heading on), or ''."""
    try:
        with open(md_path) as f:
            text = f.read()
    except OSError:
        return ""
    start = text.find("\n" + READING)
    return text[start + 1:] if start >= 0 else ""


def write_results(result: dict, results: str, report) -> str:
    """report(result) -> markdown text, written to results.md (and result to results.json). A "## Reading" section
    already in results.md (a person's reading of an earlier run, dated) is kept after the new report. Returns the
    text."""
    os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
    with open(results + ".json", "w") as f:
        json.dump(result, f, indent=1)
    text = report(result)
    reading = kept_reading(results + ".md")
    if reading:
        text = text.rstrip("\n") + "\n\n" + reading
    with open(results + ".md", "w") as f:
        f.write(text)
    print(text)
    return text


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), for the machine line every result records."""
    from rl.engine.hardware import cpu_model as model
    return model()


def print_and_write(text: str, output: str = None):
    """A report tool's table: to stdout, and to `output` too when given (the tools' --output flag)."""
    print(text, end="")
    if output:
        with open(output, "w") as f:
            f.write(text)
