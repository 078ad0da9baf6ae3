"""SWE-rebench (nebius/SWE-rebench): SWE-bench rows that carry their own environment recipe.

Each row's ``install_config`` is the spec its harness fork (SWE-rebench/SWE-bench-fork,
``swebench/harness/test_spec/python.py``) builds and tests with: ``python``, ``packages``,
``pip_packages``, ``pre_install``, ``install``, ``test_cmd``, ``eval_commands``,
``reqs_path`` / ``env_yml_path`` and the ``log_parser`` the fork grades with (a swebench parser
name). Here it becomes the row's own environment spec (keyed by the row's version and the
config's digest, so rows that share a version but not a config get their own); the eval script
and the report are the harness's, as in the fork. Images: the row's ``docker_image`` (or
``image_name``), else the fork's name for the instance under the ``swerebench`` namespace.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from swebench.harness.log_parsers import PARSER_REGISTRY
from swebench.task.checks import expected_image

from sweflow.formats.base import DatasetFormat, json_value
from sweflow.formats.swebench import COLUMNS
from sweflow.harness.specs import SpecTable
from sweflow.instances import Instance
from sweflow.instances.record import RowRefused

CONFIG = "install_config"
_SYSTEM = re.compile(r"^(apt-get|apt |DEBIAN_FRONTEND)")  # root, in the base; else in the checkout


def config_of(row: Mapping[str, Any]) -> dict[str, Any]:
    config = json_value(row.get(CONFIG), CONFIG)
    if not isinstance(config, dict):
        raise RowRefused("must be a mapping of install settings", CONFIG)
    return config


def spec_of(config: Mapping[str, Any]) -> dict[str, Any]:
    """An install_config as a sweflow environment spec (sweflow.harness.specs.EnvSpec)."""
    if not config.get("python") or not config.get("test_cmd"):
        raise RowRefused("has no python or no test_cmd", CONFIG)
    pre = list(config.get("pre_install") or [])
    paths = config.get("reqs_path") or config.get("env_yml_path") or []
    spec = {
        "python": str(config["python"]),
        "packages": config.get("packages") or "",
        "pip_packages": list(config.get("pip_packages") or []),
        "pre_install": [c for c in pre if _SYSTEM.match(c)],
        "setup_repo": [c for c in pre if not _SYSTEM.match(c)],
        "install": config.get("install") or "",
        "test_cmd": config["test_cmd"],
        "eval_commands": list(config.get("eval_commands") or []),
        "requirements_paths": [paths] if isinstance(paths, str) else list(paths),
        "log_parser": config.get("log_parser") or "parse_log_pytest",
    }
    return {k: v for k, v in spec.items() if v not in ("", [])}


def spec_version(row: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()
    return f"{row.get('version') or '0'}+{digest[:8]}"


class SweRebench(DatasetFormat):
    name = "swe-rebench"
    required = (*COLUMNS, CONFIG)
    description = "SWE-rebench: SWE-bench rows with their own install_config (nebius/SWE-rebench)"

    def task_fields(self, row: dict[str, Any]) -> dict[str, Any]:
        config = config_of(row)
        parser = config.get("log_parser") or "parse_log_pytest"
        if parser not in PARSER_REGISTRY:
            raise RowRefused(f"log_parser {parser!r} is not a swebench parser", CONFIG)
        spec_of(config)  # refused now, before any build
        return {"version": spec_version(row, config), "log_parser": parser}

    def image(self, row: Mapping[str, Any]) -> str | None:
        named = row.get("docker_image") or row.get("image_name")
        return str(named) if named else expected_image(str(row["instance_id"]), "swerebench")

    def recipes(self, rows: Iterable[Instance]) -> SpecTable:
        table: dict[str, dict[str, Any]] = {}
        for row in rows:
            config = (row.model_extra or {}).get(CONFIG)
            if config is not None and row.version:
                table.setdefault(row.repo, {})[row.version] = spec_of(config_of({CONFIG: config}))
        return SpecTable.from_mapping(table, source="SWE-rebench install_config")


FORMAT = SweRebench()
