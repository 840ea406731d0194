"""The code sandbox: runner (the privileged side of one run), bwrap (its command line), cgroup (one limit per
run), harness / serve / wire (tests in a second sandbox, over a pipe), tree (host directories of the fallback)."""
