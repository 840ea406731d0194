"""On a CPU, credo's process group builds and maps nothing of DeepSpeed's shared-memory comm op (rl/engine/dist.py
skip_cpu_shm_comm_op): a fresh checkout's first launch needs no C++ compiler and no minute of compiling, no rank maps a
69 MB /dev/shm buffer, and a build lock that an older, killed build left behind cannot hold a launch up."""
import json
import os
import stat
import subprocess
import sys

import pytest

from tests.helpers import REPO_ROOT, free_port

# One rank's init_distributed in a fresh interpreter (this process may hold a process group of its own), reporting what
# DeepSpeed kept and what /dev/shm held while the group was alive.
INIT = """
import glob, json, os, sys
from rl.engine import dist
dist.init_distributed()
import deepspeed.comm.comm as ds_comm
from deepspeed.ops.op_builder.builder import OpBuilder
report = {"shm_comm_op": ds_comm.cdb.shm_comm_op is not None, "loaded_ops": sorted(OpBuilder._loaded_ops),
          "shm_buffers": glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{os.environ['MASTER_PORT']}_*")}
dist.shutdown()
print("REPORT " + json.dumps(report))
"""


@pytest.fixture(scope="module")
def cpu_init(tmp_path_factory):
    """The init under a TORCH_EXTENSIONS_DIR of its own that holds the lock a build killed mid-compile leaves
    (torch/utils/file_baton.py: a later build of that op waits on it for ever), and with CXX a recorder, so that any
    compiler call is seen."""
    root = tmp_path_factory.mktemp("cpu_comm_op")
    extensions = root / "torch_extensions"
    (extensions / "deepspeed_shm_comm").mkdir(parents=True)
    (extensions / "deepspeed_shm_comm" / "lock").write_text("")
    calls = root / "cxx_calls.txt"
    recorder = root / "cxx"
    recorder.write_text(f'#!/bin/sh\necho "$*" >> {calls}\nexec c++ "$@"\n')
    recorder.chmod(recorder.stat().st_mode | stat.S_IXUSR)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TORCH_EXTENSIONS_DIR=str(extensions), CXX=str(recorder), RANK="0",
               LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-c", INIT], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)  # a launch held up by the planted lock would wait here until the timeout
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.split("REPORT ", 1)[1])
    compiles = [line for line in calls.read_text().splitlines() if " -c " in f" {line} "] if calls.exists() else []
    return report, compiles, extensions


def test_a_cpu_process_group_compiles_and_loads_no_deepspeed_op(cpu_init):
    report, compiles, _ = cpu_init
    assert compiles == []  # DeepSpeed may still ask the compiler its version while probing ops, never compile
    assert report["shm_comm_op"] is False and report["loaded_ops"] == []


def test_no_rank_maps_deepspeed_shared_memory_buffer(cpu_init):
    assert cpu_init[0]["shm_buffers"] == []


def test_a_build_lock_left_by_a_killed_build_cannot_hold_up_a_launch(cpu_init):
    """The init returned (within the fixture's timeout) and left the extensions folder as it found it."""
    extensions = cpu_init[2]
    assert sorted(p.name for p in extensions.iterdir()) == ["deepspeed_shm_comm"]
    assert sorted(p.name for p in (extensions / "deepspeed_shm_comm").iterdir()) == ["lock"]
