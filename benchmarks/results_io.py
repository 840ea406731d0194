"""Writing a benchmark's result: RESULTS.json (the data) and RESULTS.md (its report), and printing the report."""
import json
import os


def write_results(result: dict, results: str, report) -> str:
    """report(result) -> markdown text. Returns the text."""
    os.makedirs(os.path.dirname(os.path.abspath(results)), exist_ok=True)
    with open(results + ".json", "w") as f:
        json.dump(result, f, indent=1)
    text = report(result)
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
