"""How the N samples of a task are drawn: one temperature, and per sample a seed derived from
a base seed and the sample's index, sent with each of its model calls and recorded in its
trajectory (``Trajectory.sampling``).

The seed is a hash of (base seed, index), not ``base + index``: runs with base seeds 0 and 1
would otherwise share all but one of their samples. A resumed run draws its missing samples with
the same seeds; a folder whose saved samples were drawn otherwise is refused before any work
(:func:`check_saved`), since mixing two settings would make pass@k measure neither.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sweflow.agent.trajectory import Trajectory
from sweflow.errors import ConfigError


@dataclass(frozen=True)
class Sampling:
    """The samples' temperature and base seed."""

    temperature: float
    seed: int = 0

    def seed_of(self, index: int) -> int:
        """Sample ``index``'s seed: 31 bits, which every server's seed type holds."""
        digest = hashlib.sha256(f"{self.seed}:{index}".encode()).digest()
        return int.from_bytes(digest[:4], "big") >> 1

    def record(self, index: int) -> dict[str, Any]:
        """What a trajectory keeps of how it was drawn."""
        return {
            "sample": index,
            "temperature": self.temperature,
            "base_seed": self.seed,
            "seed": self.seed_of(index),
        }


def check_saved(out_dir: Path, sampling: Sampling) -> None:
    """Refuse a folder whose saved samples were drawn with another temperature or seed (a
    ConfigError naming the first such file); runs saved without a record pass (one run per
    task, as ``infer`` made before samples)."""
    for path in sorted((Path(out_dir) / "trajectories").glob("*/run-*.json")):
        try:
            saved = Trajectory.load(path).sampling
        except (ValueError, ValidationError):
            continue  # not finished: it is run again
        if saved is None:
            continue
        wanted = sampling.record(int(saved.get("sample", -1)))
        if {k: saved.get(k) for k in wanted} != wanted:
            raise ConfigError(
                f"{path}: drawn at temperature {saved.get('temperature')} with base seed "
                f"{saved.get('base_seed')}, not {sampling.temperature} and {sampling.seed}: "
                "use the same settings to resume this folder, or another output folder"
            )
