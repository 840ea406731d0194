"""Make DeepSpeed importable on a machine with torch and transformers but no DeepSpeed and no network: unpack the
wheels brought along in .whl/ (scripts/gpu/cuda_check.sh --prepare builds them) into a folder for PYTHONPATH,
for DeepSpeed and whichever of its import-time dependencies this Python lacks. pip is not needed: a wheel is a zip
whose root is a site-packages tree; the one whose tags this interpreter accepts is picked (packaging.tags).

    python scripts/gpu/offline_wheels.py .whl /tmp/credo_gpu_deps     # prints what it unpacked
"""
import glob
import importlib.util
import os
import sys
import zipfile

from packaging.tags import sys_tags
from packaging.utils import parse_wheel_filename

# (module to import, wheels that provide it and what it needs beyond torch/numpy/packaging/tqdm, which transformers
# already requires). pydantic 1 is not enough for DeepSpeed 0.19: checked by version below.
NEEDED = [
    ("hjson", ["hjson"]),
    ("einops", ["einops"]),
    ("msgpack", ["msgpack"]),
    ("cpuinfo", ["py_cpuinfo"]),
    ("psutil", ["psutil"]),
    ("ninja", ["ninja"]),
    ("pydantic", ["pydantic", "pydantic_core", "annotated_types", "typing_inspection", "typing_extensions"]),
    ("deepspeed", ["deepspeed"]),
]


def has_module(name: str) -> bool:
    if importlib.util.find_spec(name) is None:
        return False
    if name == "pydantic":
        import pydantic
        return int(pydantic.VERSION.split(".")[0]) >= 2
    return True


def compatible_wheel(folder: str, project: str) -> str:
    accepted = set(sys_tags())
    for path in sorted(glob.glob(os.path.join(folder, "*.whl"))):
        name, _, _, tags = parse_wheel_filename(os.path.basename(path))
        if name.replace("-", "_") == project and tags & accepted:
            return path
    raise SystemExit(f"offline_wheels: no wheel for {project} that Python {sys.version.split()[0]} accepts in "
                     f"{folder} (build them with `bash scripts/gpu/cuda_check.sh --prepare`)")


def main(folder: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    for module, projects in NEEDED:
        if has_module(module):
            print(f"{module}: present")
            continue
        for project in projects:
            path = compatible_wheel(folder, project)
            with zipfile.ZipFile(path) as wheel:
                wheel.extractall(target)
            print(f"{module}: unpacked {os.path.basename(path)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
