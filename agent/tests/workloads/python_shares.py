"""A Python workload with known shares of its time, for the agent's
Python tests (agent/tests/python.rs).

Every 20 ms of its CPU time it spends 10 ms in parse(), 7 ms in render()
(both pure Python) and 3 ms in digest(), which hashes with hashlib:
native code of libcrypto under a Python frame. So 50/35/15 of its CPU
time, all of it under <module> -> main. The slices are of the thread's
CPU time (time.thread_time), not of the wall clock, so the shares hold
however often a busy host preempts it.

Usage: python3 python_shares.py SECONDS
"""

import hashlib
import sys
import time

PERIOD = 0.020
PARSE_UNTIL = 0.010
RENDER_UNTIL = 0.017
# Small enough that one hash (tens of microseconds) does not overrun the
# share, large enough that the time is spent in libcrypto.
DATA = b"kiln" * 4096


def parse(until):
    n = 0
    while time.thread_time() < until:
        for i in range(100):
            n += i * i % 7
    return n


def render(until):
    s = 0.0
    while time.thread_time() < until:
        for i in range(100):
            s += (i ^ 0x55) / 3.0
    return s


def digest(until):
    h = b""
    while time.thread_time() < until:
        h = hashlib.sha256(DATA).digest()
    return h


def main(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        start = time.thread_time()
        parse(start + PARSE_UNTIL)
        render(start + RENDER_UNTIL)
        digest(start + PERIOD)


if __name__ == "__main__":
    main(float(sys.argv[1]))
