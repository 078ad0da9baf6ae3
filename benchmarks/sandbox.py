"""Sandbox benchmark: local vs docker vs e2b on one rootfs (``python benchmarks/sandbox.py
[--quick] [--backends local,docker,e2b]``).

The same as ``sweflow bench sandbox --json``; prints medians, p95s, the ratios against local,
exec overhead over a bare subprocess.run, idle memory with many sandboxes open, and leaks. The
e2b figures go through sweflow's E2B endpoint on loopback: a cloud adds its network round trip.
"""

import sys

from sweflow.cli import app

if __name__ == "__main__":
    app(["bench", "sandbox", "--json", *sys.argv[1:]])
