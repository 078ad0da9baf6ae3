"""Environment-preparation benchmark on the bundled real data (more-itertools releases).

``python benchmarks/envprep.py [--quick] [--no-docker]`` runs `sweflow bench envprep` twice on
the instances of tests/data/envcache, each in a scratch store:

- ``real``: their own environment (pytest only, ~30 MB venv), built offline from the wheelhouse
  of scripts/prefetch.py;
- ``representative``: the same instances in an environment grown to a typical SWE-bench size
  (numpy, pandas, scipy; benchmarks/data/specs-representative.yaml), built from the package
  index.

Prints one JSON object: the figures of ``real`` at the top level (prep p50 vs the untar and
docker baselines, bytes per instance, no-op re-build) and both runs under their names.
"""

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from sweflow.bench import ENVCACHE, WHEELHOUSE
from sweflow.bench.envprep import run
from sweflow.envcache.builder import BuildOptions, EnvBuilder
from sweflow.harness.specs import load_specs
from sweflow.instances import load_instances

HERE = Path(__file__).resolve().parent
DATA = ENVCACHE.parent


def main(quick: bool, docker: bool) -> dict:
    instances = load_instances(DATA / "instances.jsonl").raise_for_errors()
    report: dict = {}
    with tempfile.TemporaryDirectory(prefix="sweflow-envprep-") as tmp:
        mirror = Path(tmp) / "mirror"
        bundle = DATA / "more-itertools__more-itertools.bundle"
        target = mirror / "more-itertools__more-itertools.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(bundle), str(target)], check=True)
        for name, specs, wheelhouse in (
            ("real", DATA / "specs.yaml", WHEELHOUSE),
            ("representative", HERE / "data" / "specs-representative.yaml", None),
        ):
            options = BuildOptions(
                store=Path(tmp) / f"store-{name}", repo_mirror=mirror, wheelhouse=wheelhouse
            )
            builder = EnvBuilder(load_specs(specs), options)
            print(f"== {name} environment", file=sys.stderr)
            report[name] = run(
                builder, instances, quick=quick, docker=docker,
                progress=lambda line: print(line, file=sys.stderr),
            )  # fmt: skip
    return {**report["real"], **report}


if __name__ == "__main__":
    args = sys.argv[1:]
    print(json.dumps(main("--quick" in args, "--no-docker" not in args), indent=2))
