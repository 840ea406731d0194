"""The privileged side of one run: started by rewards.code in its own session, job JSON on stdin, one JSON
result line on stdout.

Job: {"code", "stdin", "tests" (None for a plain run), "keep" (the program's names the tests call, harness.py),
"isolation" ("bwrap" | "none"), "timeout_s", "memory_mb", "max_output_bytes", "max_processes", "max_file_mb"}, and
for stdin/stdout tests "stdins": a list of inputs, each run as a plain run of its own (fresh sandbox, cgroup and
uid: nothing of one input's run reaches the next), the result then {"cases": [one result per input]}. After an
input whose run timed out the rest are not run (credo's reading: each would cost the whole timeout; LiveCodeBench's
grade_stdio stops at the first failure of any kind).

A plain run is one sandboxed process: `python main.py`. A tested run is two, in two separate sandboxes that
cannot see each other: the program (serve.py runs main.py, then answers requests) and the harness (harness.py
runs the tests, which reach the program only through a pair of pipes). The harness alone holds the result pipe,
and its one line must begin with a token drawn here for this run. Every process joins the run's cgroup before
exec (one memory and pids limit for the run) and carries the rlimits (the inner layer: CPU time, address space,
file size, open files, no core dumps, processes per uid). Each sandboxed process runs as its own unprivileged uid
outside, claimed on the kernel for the run (uids.py: unique among live runs even across containers), so even the
kernel's per-uid counters and permission checks keep runs apart. This process is a child subreaper: whatever
escapes is killed at the end.

Statuses come from what this process observes, never from the program's text: "memory" only when the run's cgroup
counted an OOM kill (a program that prints "MemoryError" and exits 1 is an "error"), "timeout" from the deadline
or the CPU-time signal, "output_limit" from the bytes read, "killed" from a signal. With a cgroup, the cgroup is
the memory limit (everything the run touches, together) and no address-space rlimit is set: an allocation past
RLIMIT_AS would raise MemoryError inside the program, a failure this process cannot see. Without a writable cgroup,
RLIMIT_AS is the memory limit and running out of it reads "error".
"""
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import sys
import time

if __package__:  # imported (tests read its constants)
    from rewards.sandbox import bwrap, uids
    from rewards.sandbox.cgroup import RunCgroup
    from rewards.sandbox.tree import make_private_dir, remove_tree
else:  # started as a script with `python -I -S`: stdlib only, ~25 ms instead of ~130 ms with the rewards package
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bwrap  # noqa: E402
    import uids  # noqa: E402
    from cgroup import RunCgroup  # noqa: E402
    from tree import make_private_dir, remove_tree  # noqa: E402
    del sys.path[0]

PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNET, CLONE_NEWIPC = 0x40000000, 0x08000000
UID_BASE = uids.UID_BASE  # run uids: UID_BASE <= uid < 2 * UID_BASE (uids.py)
STUB_DIR = os.path.dirname(os.path.abspath(__file__))
SANDBOX_ROOT = "/run/credo-sandbox" if os.getuid() == 0 else os.path.join("/tmp", f"credo-sandbox-{os.getuid()}")
MAX_RESULT_BYTES = 1 << 20
FILE_FD = 10  # fds 0-5 are stdio and the harness pipes
MB = 1024 * 1024


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, 0)  # not close-on-exec: bwrap reads it by number
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _stub(name: str) -> bytes:
    with open(os.path.join(STUB_DIR, name), "rb") as f:
        return f.read()


def _rlimits(job: dict, cgroup) -> dict:
    limits = {resource.RLIMIT_CPU: int(job["timeout_s"]) + 1, resource.RLIMIT_FSIZE: job["max_file_mb"] * MB,
              resource.RLIMIT_NOFILE: 64, resource.RLIMIT_CORE: 0}
    if cgroup is None:  # with a cgroup, it is the memory limit, one the runner can observe (module docstring)
        limits[resource.RLIMIT_AS] = job["memory_mb"] * MB
    # Per uid: a limit per run as root (each run has its own uid; + 1 for the process that holds the uid's claim);
    # without root it is shared with the caller's other processes, as it always was (the pids cgroup, where
    # writable, is the real limit)
    limits[resource.RLIMIT_NPROC] = job["max_processes"] + 1
    return limits


def spawn(argv: list, fds: dict, uid: int, job: dict, cgroup, cwd: str = "/") -> int:
    """fork + exec argv with fds[target] = source (0, 1, 2, 3, ...), in the cgroup, limited, as uid. The child
    closes every other descriptor; if it cannot start it reports why on its stderr and exits 127."""
    pid = os.fork()
    if pid:
        return pid
    try:
        moved = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 1000) for target, source in fds.items()}
        for target, copy in moved.items():  # via copies above 1000: a source may sit on another's target number
            os.dup2(copy, target)
        keep = sorted(set(fds) | {0, 1, 2})
        for low, high in zip(keep, keep[1:] + [4096]):  # close everything else
            if high > low + 1:  # closerange(a, b) with b < a would close everything from a up
                os.closerange(low + 1, high)
        if cgroup is not None:
            cgroup.join()
        os.setsid()
        if job["isolation"] == "none" and os.getuid() == 0:  # no bwrap: at least no network and no shared IPC
            ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET | CLONE_NEWIPC)
        for which, value in _rlimits(job, cgroup).items():
            resource.setrlimit(which, (value, value))
        if os.getuid() == 0:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.chdir(cwd)
        env = {"PATH": "/usr/bin:/bin", "HOME": cwd, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
        os.execve(argv[0], argv, env)
    except BaseException as exc:
        os.write(2, f"sandbox setup failed: {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(127)


class Sandbox:
    """One sandboxed process: its files, its command line, and (for isolation "none") its host directory."""

    def __init__(self, job: dict, files: dict, argv: list, uid: int):
        self.job, self.uid, self.host_dir = job, uid, None
        python = bwrap.sandbox_python()
        if job["isolation"] == "bwrap":  # the files travel as memfds, at fixed numbers from FILE_FD on
            self.fds = {FILE_FD + i: _memfd(name, data) for i, (name, data) in enumerate(sorted(files.items()))}
            names = {name: FILE_FD + i for i, name in enumerate(sorted(files))}
            self.argv = bwrap.bwrap_argv(bwrap.find_bwrap(), python, names, job["max_file_mb"] * MB,
                                         ["-I", "-B"] + argv)
            self.cwd = "/"
        else:  # "none": a private host directory owned by the run's uid, removed afterwards
            self.fds = {}
            self.host_dir = make_private_dir(SANDBOX_ROOT, uid if os.getuid() == 0 else None)
            for name, data in files.items():
                path = os.path.join(self.host_dir, name)
                with open(path, "wb") as f:
                    f.write(data)
                if os.getuid() == 0:
                    os.chown(path, uid, uid)
            self.argv, self.cwd = [python, "-I", "-B"] + argv, self.host_dir

    def start(self, fds: dict, cgroup) -> int:
        return spawn(self.argv, {**fds, **self.fds}, self.uid, self.job, cgroup, self.cwd)

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        if self.host_dir:
            remove_tree(self.host_dir)


def _status(returncode: int, wall: float, job: dict, out_of_memory: bool) -> str:
    """The label of a run that ended by itself, from what this process saw: its exit code, its time, the cgroup's
    OOM-kill counter. Never from its output: a program can print anything."""
    if returncode == 0:
        return "ok"
    if out_of_memory:
        return "memory"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL) and wall >= job["timeout_s"] * 0.5:
        return "timeout"  # RLIMIT_CPU: the program burnt its CPU-time budget
    return "killed" if returncode < 0 else "error"


def _exit_code(wait_status: int, isolation: str) -> int:
    code = os.waitstatus_to_exitcode(wait_status)
    if isolation == "bwrap" and 128 < code < 128 + 65:  # bwrap reports a child killed by signal N as 128 + N
        return 128 - code
    return code


def run(job: dict) -> dict:
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if job.get("stdins") is None:
        return run_once(job, job.get("stdin", ""))
    cases = []
    for stdin in job["stdins"]:
        cases.append(run_once({**job, "tests": None}, stdin))
        if cases[-1]["status"] == "timeout":
            break
    return {"cases": cases}


def run_once(job: dict, stdin: str) -> dict:
    """One run (plain, or tested when job["tests"] is a list) with `stdin` on the program's standard input."""
    tested = job.get("tests") is not None
    token = os.urandom(16).hex()  # secrets.token_hex(16) is exactly this; importing secrets costs ~10 ms a run
    held = uids.claim() if os.getuid() == 0 else None  # without root the run keeps the caller's uid
    uid = held.uid if held else None
    cgroup = RunCgroup.create(job["memory_mb"] * MB, job["max_processes"] + 8)  # + bwrap's own processes
    program_files = {"main.py": job["code"].encode()}
    if tested:
        program_files.update({name: _stub(name) for name in ("serve.py", "wire.py")})
    program = Sandbox(job, program_files, ["serve.py" if tested else "main.py"], uid)
    sandboxes = [program]
    stdin_fd = _memfd("stdin", stdin.encode())
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    program_fds = {0: stdin_fd, 1: out_w, 2: err_w}
    child_ends = [stdin_fd, out_w, err_w]
    readers = {out_r: "stdout", err_r: "stderr"}
    if tested:
        harness_job = {"tests": job["tests"], "keep": job.get("keep", []), "token": token,
                       "max_reply_bytes": job["max_output_bytes"] * 16}
        harness = Sandbox(job, {"job.json": json.dumps(harness_job).encode(),
                                "harness.py": _stub("harness.py"), "wire.py": _stub("wire.py")},
                          ["harness.py"], None if uid is None else uid + 1)
        sandboxes.append(harness)
        req_r, req_w = os.pipe()      # harness -> program
        rep_r, rep_w = os.pipe()      # program -> harness
        res_r, res_w = os.pipe()      # harness -> here, nowhere else
        hout_r, hout_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        program_fds.update({3: req_r, 4: rep_w})
        harness_fds = {0: null, 1: hout_w, 2: hout_w, 3: res_w, 4: rep_r, 5: req_w}
        child_ends += [req_r, req_w, rep_r, rep_w, res_w, hout_w, null]
        readers.update({res_r: "result", hout_r: "harness"})
    start = time.perf_counter()
    pids = {program.start(program_fds, cgroup): "program"}
    if tested:
        pids[harness.start(harness_fds, cgroup)] = "harness"
    for fd in child_ends:
        os.close(fd)
    buffers = {name: bytearray() for name in readers.values()}
    caps = {"stdout": job["max_output_bytes"], "stderr": job["max_output_bytes"], "harness": job["max_output_bytes"],
            "result": MAX_RESULT_BYTES}
    waits, status = {}, None
    deadline = start + job["timeout_s"]
    open_fds = set(readers)
    while len(waits) < len(pids):
        ready = select.select(list(open_fds), [], [], 0.005)[0] if open_fds else time.sleep(0.005) or []
        for fd in ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                open_fds.discard(fd)
            buffers[readers[fd]] += chunk
        if len(buffers["stdout"]) + len(buffers["stderr"]) > job["max_output_bytes"]:
            status = "output_limit"
        elif tested and (len(buffers["harness"]) > caps["harness"] or len(buffers["result"]) > caps["result"]):
            status = "harness_output_limit"
        elif time.perf_counter() > deadline:
            status = "timeout"
        for pid in pids:
            if pid in waits:
                continue
            if status:
                os.kill(pid, signal.SIGKILL)
            done, wait_status = os.waitpid(pid, 0 if status else os.WNOHANG)
            if done:
                waits[pid] = wait_status
                if pids[pid] == "program":
                    program_wall = time.perf_counter() - start
    for fd in open_fds:  # what was written just before exit (a pipe may stay open in an escaped grandchild)
        while select.select([fd], [], [], 0)[0] and len(buffers[readers[fd]]) <= caps[readers[fd]]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buffers[readers[fd]] += chunk
    for fd in readers:
        os.close(fd)
    out_of_memory = cgroup is not None and cgroup.ran_out_of_memory()
    if cgroup is not None:
        cgroup.kill_all()
    if held:
        held.release()  # after the cgroup is empty: the uid stays claimed while the run's processes have it
    _kill_descendants()  # and reap: what the run's PID namespaces leave is re-parented here, as zombies or not
    if cgroup is not None:
        cgroup.remove()
    for sandbox in sandboxes:
        sandbox.close()
    program_pid = next(p for p, role in pids.items() if role == "program")
    returncode = _exit_code(waits[program_pid], job["isolation"])
    stderr = bytes(buffers["stderr"])
    if status is None:
        status = _status(returncode, program_wall, job, out_of_memory)
    elif status == "harness_output_limit":
        status = "error"
    cap = job["max_output_bytes"]
    result = {"status": status, "returncode": returncode, "wall_s": program_wall if status != "timeout" else
              job["timeout_s"], "stdout": bytes(buffers["stdout"][:cap]).decode("utf-8", "replace"),
              "stderr": stderr[:cap].decode("utf-8", "replace"), "isolation": _isolation(job, cgroup), "uid": uid}
    if tested:
        result["tests"], result["tests_error"] = _read_results(bytes(buffers["result"]), token, len(job["tests"]),
                                                               bytes(buffers["harness"][-2000:]))
    return result


def _isolation(job: dict, cgroup) -> str:
    return f"{job['isolation']}+{'cgroup' if cgroup is not None else 'rlimits'}"


def _read_results(raw: bytes, token: str, count: int, harness_output: bytes):
    """The harness's one line, if it carries this run's token and one outcome per test; else (None, why)."""
    text = raw.decode("utf-8", "replace")
    if not text.startswith(token) or not text.endswith("\n") or text.count("\n") != 1:
        why = harness_output.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no results"]
        return None, f"the test harness gave no results ({why[0]})"
    try:
        outcomes = json.loads(text[len(token):])
    except ValueError:
        return None, "the test harness gave malformed results"
    if type(outcomes) is not list or len(outcomes) != count or not all(o is None or type(o) is str for o in outcomes):
        return None, "the test harness gave malformed results"
    return outcomes, ""


def _children() -> list:
    me, found = os.getpid(), []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
            except OSError:
                continue
            if int(fields[1]) == me:
                found.append(int(name))
    return found


def _no_children_left() -> bool:
    """Reap the children that have exited; True when the kernel says none are left (ECHILD), live or zombie. Every
    process below this one has a child of this one among its ancestors (orphans are re-parented here), so no
    children means nothing below: the /proc scan (one file per process on the machine) is only needed when one of
    them is still alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def _kill_descendants():
    """SIGKILL every process below this one: as a subreaper, orphans are re-parented here, so killing our children
    until none are left reaches them all (a fork bomb may spawn while we kill: repeat)."""
    if _no_children_left():
        return
    for _ in range(200):
        children = _children()
        if not children:
            return
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in children:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


if __name__ == "__main__":
    print(json.dumps(run(json.load(sys.stdin))), flush=True)
