"""A uid of its own for each run, claimed on the kernel rather than derived from anything one container sees.

The uid of a run was once a base plus the runner's pid; but a pid is only unique in its PID namespace, and two
trainers in separate containers on one kernel (the usual way to share a GPU node) may both run a runner as pid 1
or 7. Their sandboxes would then share a uid, and with it the kernel's per-uid counters: one run holding
RLIMIT_NPROC's processes would starve the other (issue 51). Nothing on a file system is shared between such
containers either, so a lock file cannot arbitrate. What the kernel itself counts per uid can: the number of
processes that a uid has, across every PID namespace of the user namespace (and charged to each parent user
namespace of a process in bubblewrap's), which is what RLIMIT_NPROC limits.

The claim: draw an even uid at random from [UID_BASE, 2 * UID_BASE) (2**29 of them), fork a holder that becomes
that uid with RLIMIT_NPROC = 2 and forks once. The fork succeeds only if the holder and its child are the uid's
only processes on the kernel; if anything else has that uid (another run's holder or sandbox), the fork is refused
(EAGAIN) and another uid is drawn. Two holders that arrive at once see each other and both draw again, so no two
live runs proceed with one uid. The holder lives until the run releases it (or its runner dies: it reads a pipe
that only the runner holds open), so the uid stays claimed while the run's processes have it. A run uses the
claimed uid for its program and the next (odd) one for its test harness.
"""
import os
import resource
import signal

UID_BASE = 1 << 30  # far above any login or system account, and below 2**31 (some tools read uids as signed)
SLOTS = UID_BASE // 2
MAX_DRAWS = 64


def random_uids():
    """Even uids in [UID_BASE, 2 * UID_BASE), drawn from os.urandom (no seed a container could share)."""
    while True:
        yield UID_BASE + 2 * (int.from_bytes(os.urandom(4), "little") % SLOTS)


class Claim:
    """A uid held by a holder process until `release`."""

    def __init__(self, uid: int, holder: int, lifeline: int):
        self.uid, self.holder, self.lifeline = uid, holder, lifeline

    def release(self):
        os.close(self.lifeline)  # the holder reads EOF and exits; kill it too, for a runner that cannot wait
        try:
            os.kill(self.holder, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.holder, 0)


def try_claim(uid: int):
    """A Claim on `uid` if no other process on this kernel has it, else None. Root only (it changes uid)."""
    answer_r, answer_w = os.pipe()
    life_r, life_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            for low, high in sorted([(0, min(answer_w, life_r)), (min(answer_w, life_r) + 1, max(answer_w, life_r)),
                                     (max(answer_w, life_r) + 1, 4096)]):
                os.closerange(low, high)  # nothing of the runner's (its result pipe above all) stays open here
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)  # drops root's capabilities, so RLIMIT_NPROC applies to this process
            except OSError as exc:  # a user namespace that maps no such uid: no draw would do better
                os.write(answer_w, b"e" + str(exc).encode()[:300])
                os._exit(0)
            resource.setrlimit(resource.RLIMIT_NPROC, (2, 2))
            try:
                child = os.fork()  # this holder and the child: 2; a third process of the uid refuses it
            except BlockingIOError:
                os.write(answer_w, b"n")
                os._exit(0)
            if child == 0:
                os._exit(0)
            os.waitpid(child, 0)
            os.write(answer_w, b"y")
            os.close(answer_w)
            os.read(life_r, 1)  # hold the uid until the runner closes its end (or dies)
        finally:
            os._exit(0)
    os.close(answer_w)
    os.close(life_r)
    answer = os.read(answer_r, 400)
    os.close(answer_r)
    if answer == b"y":
        return Claim(uid, pid, life_w)
    os.close(life_w)
    os.waitpid(pid, 0)
    if answer != b"n":
        raise RuntimeError(f"the sandbox cannot run as uid {uid}: {answer[1:].decode(errors='replace') or 'no answer'}")
    return None


def claim(candidates=None) -> Claim:
    """The first free uid among `candidates` (default: random_uids()), tried at most MAX_DRAWS times."""
    candidates = iter(candidates if candidates is not None else random_uids())
    for _, uid in zip(range(MAX_DRAWS), candidates):
        held = try_claim(uid)
        if held is not None:
            return held
    raise RuntimeError(f"no free sandbox uid after {MAX_DRAWS} draws")
