"""A free TCP port for a launcher's rendezvous (--master_port), for the benchmarks and the tests that start one.

scripts/launch.py keeps a picker of its own: a user's launch prefers DeepSpeed's default port 29500 while it is free.
"""
import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
