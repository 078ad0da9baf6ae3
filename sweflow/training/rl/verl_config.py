"""verl's own trainer config, composed and checked by verl's own code: run in verl's environment.

``python -m sweflow.training.rl.verl_config compose OUT OVERRIDE...`` composes verl's
``ppo_trainer`` config with Hydra's compose API and the overrides (Hydra's grammar: an unknown
key is refused unless added with ``+``), then checks it as ``verl.trainer.main_ppo`` would
before it starts anything: each value set is merged into the dataclass its section's
``_target_`` names (OmegaConf checks its type) and verl's ``validate_config`` runs (batch sizes
against GPUs, micro batches, the actor's and critic's own checks). The resolved config is saved
to OUT; a refusal is one line on stderr naming the key, exit 2.

``python -m sweflow.training.rl.verl_config schema OUT`` writes what the pipeline's own
environment checks overrides against without verl installed (sweflow.training.rl.verl_schema):
the composed default config, unresolved, the type of every key a verl dataclass declares, and
which sections are dataclasses.

Imports verl, Hydra and OmegaConf inside its functions: only verl's environment has them.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
import types
import typing
from importlib import import_module
from pathlib import Path
from typing import Any

EXIT_REFUSED = 2


class Refused(Exception):
    """A setting verl would refuse; the message is one line naming it."""


def compose(overrides: list[str]) -> Any:
    """verl's ppo_trainer config with ``overrides`` applied (Hydra's compose API)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_module("verl.trainer.config", version_base=None):
            return hydra_compose("ppo_trainer", overrides=overrides)
    except (HydraException, OmegaConfBaseException) as exc:
        raise Refused(_one_line(exc)) from None


def check(config: Any, overrides: list[str]) -> None:
    """What verl checks before it launches: each value the overrides set, against the type
    its dataclass section declares (OmegaConf's merge into the dataclass, as verl's
    omega_conf_to_dataclass does; verl's own defaults are left to verl), then verl's
    validate_config on the whole."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    plain = OmegaConf.to_container(config, resolve=True)
    resolved = OmegaConf.create(plain)
    sections = dataclass_sections(plain)
    for text in overrides:
        key = text.partition("=")[0].lstrip("+~")
        path, _, leaf = key.rpartition(".")
        if text.startswith("~") or path not in sections:
            continue
        try:
            typed = OmegaConf.structured(sections[path])
        except Exception:  # noqa: BLE001 - verl instantiates it by _target_, types unchecked
            continue
        try:
            OmegaConf.merge(typed, {leaf: OmegaConf.select(resolved, key)})
        except OmegaConfBaseException as exc:
            raise Refused(f"{key}: {_one_line(exc)}") from None
    try:
        validate_config(
            resolved,
            use_reference_policy=need_reference_policy(resolved),
            use_critic=need_critic(resolved),
        )
    except (AssertionError, ValueError, TypeError, HydraException, OmegaConfBaseException) as exc:
        raise Refused(f"verl's validate_config: {_one_line(exc)}") from None


def dataclass_sections(config: Any, prefix: str = "") -> dict[str, type]:
    """The sections of ``config`` (a plain container) whose ``_target_`` names a dataclass, by
    dotted path."""
    found: dict[str, type] = {}
    if not isinstance(config, dict):
        return found
    target = config.get("_target_")
    if isinstance(target, str):
        module, _, name = target.rpartition(".")
        cls = getattr(import_module(module), name, None)
        if dataclasses.is_dataclass(cls):
            found[prefix.rstrip(".")] = cls
    for key, value in config.items():
        found.update(dataclass_sections(value, f"{prefix}{key}."))
    return found


def schema() -> dict[str, Any]:
    """The default config (unresolved), the types verl's dataclasses declare, and its version."""
    import verl
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(compose([]), resolve=False)
    sections = dataclass_sections(config)
    kinds = {}
    for path, cls in sections.items():
        hints = typing.get_type_hints(cls)
        for item in dataclasses.fields(cls):
            if not item.name.startswith("_"):
                kinds[f"{path}.{item.name}"] = kind(hints.get(item.name, Any))
    return {
        "verl": verl.__version__,
        "config": config,
        "types": kinds,
        "dataclasses": {path: f"{c.__module__}.{c.__qualname__}" for path, c in sections.items()},
    }


def kind(annotation: Any) -> dict[str, Any]:
    """A field's type as the pipeline's check reads it: ``{"type": int|float|bool|str|list|
    dict|section|any, "optional": bool, "choices": [...]}``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        found = kind(inner[0]) if len(inner) == 1 else {"type": "any"}
        return {**found, "optional": type(None) in args or found.get("optional", False)}
    if origin is typing.Literal:
        return {"type": "any", "choices": list(args)}
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return {"type": "any", "choices": [m.value for m in annotation]}
    if dataclasses.is_dataclass(annotation):
        return {"type": "section"}
    simple = {int: "int", float: "float", bool: "bool", str: "str", list: "list", tuple: "list"}
    simple |= {dict: "dict"}
    return {"type": simple.get(origin or annotation, "any")}


def _one_line(exc: BaseException) -> str:
    """The first lines of an error as one line, without OmegaConf's key/type trailer."""
    trailer = ("full_key:", "object_type=", "reference_type=", "Set the environment variable")
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (
        " ".join(line for line in lines if not line.startswith(trailer))[:500] or type(exc).__name__
    )


def main(argv: list[str]) -> int:
    if argv[:1] == ["schema"] and len(argv) == 2:
        Path(argv[1]).write_text(json.dumps(schema(), indent=1, sort_keys=True) + "\n")
        return 0
    if argv[:1] != ["compose"] or len(argv) < 2:
        print("usage: python -m sweflow.training.rl.verl_config compose OUT [OVERRIDE...]")
        print("       python -m sweflow.training.rl.verl_config schema OUT")
        return 1
    from omegaconf import OmegaConf

    try:
        config = compose(argv[2:])
        check(config, argv[2:])
    except Refused as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    Path(argv[1]).write_text(OmegaConf.to_yaml(config, resolve=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
