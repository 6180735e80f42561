"""The agent's Python workload (agent/tests/workload/python_shares.py:
50/35/15 % of its CPU time in parse, render and digest), profiled by the
official pyroscope-io SDK and pushed to Kiln (kiln/tests/pyroscope.rs).

Usage: python pyroscope_shares.py URL KEY SECONDS
"""

import os
import sys

import pyroscope

sys.path.insert(
    0,
    os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "agent", "tests", "workloads"),
)
import python_shares  # noqa: E402


def run(url, key, seconds):
    pyroscope.configure(
        application_name="kiln-py",
        server_address=url,
        basic_auth_username="kiln",
        basic_auth_password=key,
        sample_rate=100,
        upload_interval=2,
        # digest's hashing releases the GIL: sample every thread, with or
        # without it, so its share is CPU time, not time holding the GIL.
        gil_only=False,
        enable_logging=True,
        tags={"env": "test"},
    )
    python_shares.main(seconds)
    # Sends what was sampled since the last upload.
    pyroscope.shutdown()


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], float(sys.argv[3]))
