"""Write sweflow/data/formats/swe-rebench/rows.jsonl: the SWE-bench-format rows of
sweflow/data/envcache (more-itertools releases, built offline from the bundle beside them), each
with the ``install_config`` SWE-rebench rows carry, made from the spec they share.

A SWE-rebench row is a SWE-bench row plus its own recipe (``install_config``: ``python``,
``packages``, ``pip_packages``, ``install``, ``test_cmd``, ``log_parser``, as its harness fork
reads them), so these rows build with no specs file: the recipe route of the format, on a real
repository and its real test suite. ``python scripts/make_swerebench_rows.py`` gives the same
bytes on every run.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

DATA = Path(__file__).resolve().parents[1] / "sweflow" / "data"
SOURCE = DATA / "envcache"
OUT = DATA / "formats" / "swe-rebench" / "rows.jsonl"
ROWS = 5


def install_config(spec: dict) -> dict:
    """The spec as SWE-rebench's ``install_config`` names its fields."""
    return {
        "python": spec["python"],
        "packages": spec.get("packages", ""),
        "pip_packages": spec["pip_packages"],
        "install": spec["install"],
        "test_cmd": spec["test_cmd"],
        "log_parser": "parse_log_pytest",
    }


def main(out: Path = OUT) -> None:
    specs = yaml.safe_load((SOURCE / "specs.yaml").read_text())
    lines = []
    for line in (SOURCE / "instances.jsonl").read_text().splitlines()[:ROWS]:
        row = json.loads(line)
        row["install_config"] = install_config(specs[row["repo"]][row["version"]])
        lines.append(json.dumps(row))
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} rows to {out}")


if __name__ == "__main__":
    main()
