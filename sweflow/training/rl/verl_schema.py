"""verl's settings as sweflow writes them, and the user's ``rl.verl.overrides`` checked against
verl's own schema in the pipeline's environment, where verl is not installed.

sweflow sets some of verl's keys from the ``rl`` section (:func:`trainer_settings`) and some for
its own machinery (the agent loop, its logs, its resume); :data:`OWNED` says which field sets each
one, so an override of one is refused naming that field. Any other key of verl's ``ppo_trainer``
config is the user's, in Hydra's override syntax (``key=value``; ``+key=value`` adds a key,
``++key=value`` sets or adds, ``~key`` deletes). They are checked, when the ``rl`` section is
read, against verl 0.9.1's schema as verl itself composes it (sweflow/data/verl-*.json, written
in verl's environment by ``python -m sweflow.training.rl.verl_config schema``; a slow test
rewrites it from the installed verl and compares): the key must exist (or be added with ``+``
where verl's section is not a dataclass), the value must have the type verl's dataclass declares
or the default has. Then the checks the AgentSandbox cookbook warns about, on the whole config
with its interpolations resolved: with dynamic batch sizes, each ``*max_token_len_per_gpu``
times the sequence-parallel size must hold ``max_prompt_length + max_response_length`` (verl's
``max_token_len >= max_seq_len``); ``train_batch_size x rollout.n`` must divide by the GPUs.

At launch (and ``--dry-run``) verl's own Hydra composes the same overrides and verl's own checks
run on the result (sweflow.training.rl.verl_config): values this table cannot judge, such as
Hydra's grammar in full or a dataclass's own ``__post_init__``, are refused there.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import yaml

from sweflow.training.rl.verl_objective import VERL_OWNED, verl_objective

if TYPE_CHECKING:
    from sweflow.training.rl.config import RLConfig

SCHEMA = "verl-0.9.1-ppo-trainer.json"  # in sweflow/data
_VALIDATION = "rl.validation (tasks, every, samples, temperature, before_train)"
_MACHINERY = {
    "data.train_files": "the train tasks' parquet sweflow writes",
    "data.return_raw_chat": "verl's dataset hands the agent loop the raw row",
    "actor_rollout_ref.rollout.mode": "the agent loop runs on verl's async rollout",
    "actor_rollout_ref.rollout.calculate_log_probs": "episodes carry their sampled log-probs",
    "actor_rollout_ref.rollout.agent.agent_loop_config_path": "names sweflow's agent loop",
    "actor_rollout_ref.rollout.agent.default_agent_loop": "names sweflow's agent loop",
    "actor_rollout_ref.rollout.agent.num_workers": "the largest divisor of the batch up to 8",
    "trainer.default_local_dir": "checkpoints go to the run folder, where resume finds them",
    "trainer.resume_mode": "sweflow resumes a run whose inputs are unchanged",
    "trainer.logger": "its file logger is where sweflow reads verl's per-step metrics",
    "trainer.validation_data_dir": "where sweflow reads the validation episodes back",
}
OWNED: dict[str, str] = {  # verl key -> what sets it instead of an override
    **VERL_OWNED,  # the knobs papers ablate: estimator, clip range, aggregation, KL, LoRA
    "data.train_batch_size": "rl.tasks_per_step",
    "data.max_prompt_length": "rl.max_prompt_length",
    "data.max_response_length": "rl.max_response_length",
    "data.seed": "rl.seed",
    "actor_rollout_ref.model.path": "rl.model",
    "actor_rollout_ref.actor.optim.lr": "rl.learning_rate",
    "actor_rollout_ref.rollout.n": "rl.rollouts_per_task",
    "actor_rollout_ref.rollout.temperature": "rl.temperature",
    "actor_rollout_ref.rollout.tensor_model_parallel_size": "rl.verl.tensor_parallel_size",
    "trainer.total_training_steps": "rl.steps",
    "trainer.save_freq": "rl.checkpoint_every",
    "trainer.n_gpus_per_node": "rl.verl.gpus_per_node",
    "trainer.nnodes": "rl.verl.nodes",
    "ray_kwargs.ray_init.address": "rl.verl.ray_address",
    "data.val_files": _VALIDATION,
    "trainer.test_freq": _VALIDATION,
    "trainer.val_before_train": _VALIDATION,
    "actor_rollout_ref.rollout.val_kwargs.n": _VALIDATION,
    "actor_rollout_ref.rollout.val_kwargs.temperature": _VALIDATION,
    "actor_rollout_ref.rollout.val_kwargs.do_sample": _VALIDATION,
    **{key: f"sweflow: {why}" for key, why in _MACHINERY.items()},
}
# (dynamic batch size flag, its token budget per GPU, its sequence-parallel size)
_ACTOR = "actor_rollout_ref.actor"
_BUDGETS = [
    (
        f"{_ACTOR}.use_dynamic_bsz",
        f"{_ACTOR}.ppo_max_token_len_per_gpu",
        f"{_ACTOR}.ulysses_sequence_parallel_size",
    ),
    (
        "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        f"{_ACTOR}.ulysses_sequence_parallel_size",
    ),
    (
        "actor_rollout_ref.ref.log_prob_use_dynamic_bsz",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    ),
    (
        "critic.use_dynamic_bsz",
        "critic.ppo_max_token_len_per_gpu",
        "critic.ulysses_sequence_parallel_size",
    ),
    (
        "critic.use_dynamic_bsz",
        "critic.forward_max_token_len_per_gpu",
        "critic.ulysses_sequence_parallel_size",
    ),
]
_OVERRIDE = re.compile(
    r"^(?P<op>~|\+\+|\+)?(?P<key>[A-Za-z_][\w\-]*(?:\.[A-Za-z_@][\w\-]*)*)(?:=(?P<value>.*))?$",
    re.S,
)
_INT = re.compile(r"^[-+]?\d[\d_]*$")
_FLOAT = re.compile(r"^[-+]?(\d[\d_]*\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf|nan)$", re.I)


@dataclass
class Override:
    """One Hydra override: ``op`` "" (set an existing key), "+" (add), "++" (set or add) or
    "~" (delete)."""

    text: str
    op: str
    key: str
    value: Any = None


@cache
def schema() -> dict[str, Any]:
    """verl's composed default config, its dataclasses' types and sections (see the module)."""
    return json.loads((files("sweflow.data") / SCHEMA).read_text())


def trainer_settings(rl: RLConfig) -> dict[str, Any]:
    """The keys of verl's config that the ``rl`` section sets (paths and the agent loop's
    files are added where they are written: sweflow.training.rl.verl_backend)."""
    settings: dict[str, Any] = {
        **verl_objective(rl),  # estimator, clip range, loss aggregation, KL, LoRA
        "data.train_batch_size": rl.tasks_per_step,
        "data.max_prompt_length": rl.max_prompt_length,
        "data.max_response_length": rl.max_response_length,
        "data.return_raw_chat": True,
        "data.dataloader_num_workers": 0,
        "data.seed": rl.seed,
        "actor_rollout_ref.actor.optim.lr": rl.learning_rate,
        "actor_rollout_ref.actor.ppo_mini_batch_size": rl.tasks_per_step,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.mode": "async",
        "actor_rollout_ref.rollout.n": rl.rollouts_per_task,
        "actor_rollout_ref.rollout.temperature": rl.temperature,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": rl.verl.tensor_parallel_size,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 1,
        "actor_rollout_ref.rollout.calculate_log_probs": True,
        "trainer.total_training_steps": rl.steps,
        "trainer.save_freq": rl.checkpoint_every,
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.resume_mode": "auto",
        "trainer.n_gpus_per_node": rl.verl.gpus_per_node,
        "trainer.nnodes": rl.verl.nodes,
        "trainer.logger": ["console", "tensorboard", "file"],  # file: VERL_FILE_LOGGER_PATH
        "trainer.project_name": "sweflow",
    }
    if (val := rl.validation) is not None:
        settings |= {
            "trainer.test_freq": val.every,
            "trainer.val_before_train": val.before_train,
            "actor_rollout_ref.rollout.val_kwargs.n": val.samples,
            "actor_rollout_ref.rollout.val_kwargs.temperature": val.temperature,
            "actor_rollout_ref.rollout.val_kwargs.do_sample": val.temperature > 0,
        }
    if rl.algorithm == "ppo":
        settings["critic.ppo_micro_batch_size_per_gpu"] = 1
    if rl.verl.ray_address:
        settings["+ray_kwargs.ray_init.address"] = rl.verl.ray_address
    return settings


def hydra_value(value: object) -> str:
    """A Python value in Hydra's override syntax."""
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return str(value)


def parse(text: str, field: str = "rl.verl.overrides") -> Override:
    """One override string of ``field``, refused with a message naming it when it is not
    Hydra's form."""
    match = _OVERRIDE.match(text.strip())
    if match is None:
        raise ValueError(f"{field} {text!r}: expected key=value, +key=value, ++key=value or ~key")
    op, key, raw = match["op"] or "", match["key"], match["value"]
    if raw is None and op != "~":
        raise ValueError(f"{field} {text!r}: expected {op}{key}=VALUE")
    return Override(text, op, key, None if raw is None else parse_value(raw, text, field))


def parse_value(raw: str, text: str, field: str = "rl.verl.overrides") -> Any:
    """A value as Hydra reads it: numbers, true/false, null, [lists], {dicts}, quoted or bare
    strings; ``${...}`` interpolations are kept as they are, for OmegaConf to resolve."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    if "${" in raw:
        return raw
    if _INT.match(raw):
        return int(raw.replace("_", ""))
    if _FLOAT.match(raw):
        return float(raw.replace("_", ""))
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw.lower() == "null":
        return None
    if raw[:1] in "[{":
        try:
            return _numbers(yaml.safe_load(raw))
        except yaml.YAMLError:
            raise ValueError(f"{field} {text!r}: {raw} is not a list or mapping") from None
    if "," in raw:
        raise ValueError(f"{field} {text!r}: a,b is a Hydra sweep; a list is [{raw}]")
    return raw


def _numbers(value: Any) -> Any:
    """YAML 1.1 reads 1e-6 as a string; Hydra reads it as a number."""
    if isinstance(value, str) and _FLOAT.match(value):
        return float(value)
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    return value


def check_settings(rl: RLConfig) -> None:
    """``rl.verl.overrides`` checked, each against verl's schema, then the whole config as the
    cookbook warns. Raises ValueError, one line naming the override or the keys."""
    config = copy.deepcopy(schema()["config"])
    for key, value in trainer_settings(rl).items():
        _apply(config, Override(key, "+" if key[0] == "+" else "", key.lstrip("+"), value))
    for text in rl.verl.overrides:
        override = parse(text)
        if (owner := OWNED.get(override.key)) is not None:
            raise ValueError(f"rl.verl.overrides {text!r}: {override.key} is set by {owner}")
        _check_type(override)
        _apply(config, override)
    _check_budgets(config)
    _check_gpus(config)


def _apply(config: dict, override: Override) -> None:
    """Hydra's rules for ``op`` on verl's config (struct: a new key needs ``+``)."""
    key, text = override.key, override.text
    *parents, leaf = key.split(".")
    node: Any = config
    for part in parents:
        node = node.get(part) if isinstance(node, dict) else None
    exists = isinstance(node, dict) and leaf in node
    if override.op == "~":
        if not exists:
            raise ValueError(f"rl.verl.overrides {text!r}: verl has no key {key} to delete")
        del node[leaf]
        return
    if override.op == "" and not exists:
        raise ValueError(f"rl.verl.overrides {text!r}: {_unknown(key)}")
    if override.op == "+" and exists:
        raise ValueError(f"rl.verl.overrides {text!r}: {key} exists; set it with {text[1:]}")
    if override.op and not exists and (section := _dataclass_above(key)):
        raise ValueError(
            f"rl.verl.overrides {text!r}: {section} is verl's {schema()['dataclasses'][section]}, "
            f"which has no field {leaf}"
        )
    node = config
    for part in parents:
        if not isinstance(node.get(part), dict):
            node[part] = {}
        node = node[part]
    node[leaf] = override.value


def _unknown(key: str) -> str:
    """``verl has no key K``, with the nearest keys verl has beside it."""
    parent, _, leaf = key.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in _flat() if k.rpartition(".")[0] == parent]
    alike = [k for k in siblings if k.startswith(leaf)] or difflib.get_close_matches(
        leaf, siblings, n=2, cutoff=0.6
    )
    near = [f"{parent}.{k}" for k in alike[:2]]
    near = near or difflib.get_close_matches(key, list(_flat()), n=2, cutoff=0.8)
    hint = f" (did you mean {' or '.join(near)}?)" if near else ""
    return f"verl {schema()['verl']} has no key {key}{hint}; a new key is added with +{key}=..."


@cache
def _flat() -> dict[str, Any]:
    """verl's default config as ``{dotted.key: value}``, leaves only."""
    out: dict[str, Any] = {}

    def walk(node: dict, prefix: str) -> None:
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v

    walk(schema()["config"], "")
    return out


def _dataclass_above(key: str) -> str | None:
    """The dataclass section that is ``key``'s parent, if any (verl refuses a field it lacks)."""
    parent = key.rpartition(".")[0]
    return parent if parent in schema()["dataclasses"] else None


def _check_type(override: Override) -> None:
    """The value's type against the one verl's dataclass declares for the key (or the default
    has, for keys of plain sections)."""
    value, key = override.value, override.key
    if override.op == "~" or (isinstance(value, str) and "${" in value):
        return
    declared = schema()["types"].get(key)
    if declared is None:
        default = _flat().get(key, _MISSING)
        if default is _MISSING or default is None or (isinstance(default, str) and "${" in default):
            return
        declared = {"type": _kind_of(default)}
    if value is None:
        if declared.get("optional") or declared["type"] == "any":
            return
        raise ValueError(f"rl.verl.overrides {override.text!r}: {key} cannot be null")
    if "choices" in declared and value not in declared["choices"]:
        raise ValueError(
            f"rl.verl.overrides {override.text!r}: {key} is one of {declared['choices']}"
        )
    wanted = declared["type"]
    ok = {
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "bool": isinstance(value, bool),
        "str": not isinstance(value, list | dict),
        "list": isinstance(value, list),
        "dict": isinstance(value, dict),
        "section": isinstance(value, dict),
    }.get(wanted, True)
    if not ok:
        raise ValueError(
            f"rl.verl.overrides {override.text!r}: {key} takes {_A[wanted]}, not {value!r}"
        )


_A = {"int": "an integer", "float": "a number", "bool": "true or false", "list": "a list"}
_A |= {"dict": "a mapping", "section": "a mapping"}


def _kind_of(value: Any) -> str:
    """The type a key of a plain section takes: its default's."""
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("list", list)):
        if isinstance(value, types):
            return kind
    return "dict" if isinstance(value, dict) else "str"


_MISSING = object()
_SELECT = re.compile(r"^\$\{oc\.select:([\w.]+),\s*([^}]*)\}$")
_REFERENCE = re.compile(r"^\$\{(\.?[\w.]+)\}$")


def _get(config: dict, key: str) -> Any:
    """The value at ``key`` with the interpolations verl's defaults use resolved, as OmegaConf
    would: ``${oc.select:KEY,DEFAULT}``, ``${KEY}`` and ``${.SIBLING}``."""
    node: Any = config
    for part in key.split("."):
        node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
    if isinstance(node, str) and (select := _SELECT.match(node)):
        found = _get(config, select[1])
        return parse_value(select[2], node) if found is _MISSING or found == "???" else found
    if isinstance(node, str) and (reference := _REFERENCE.match(node)):
        target = reference[1]
        if target.startswith("."):
            target = f"{key.rpartition('.')[0]}{target}"
        return _get(config, target)
    return node


def _check_budgets(config: dict) -> None:
    """With dynamic batch sizes a micro-batch holds at most a token budget per GPU times the
    sequence-parallel size, and verl asserts the longest sequence fits it."""
    prompt, response = (
        _get(config, "data.max_prompt_length"),
        _get(config, "data.max_response_length"),
    )
    critic = _get(config, "critic.enable")
    used = {
        "critic": _get(config, "algorithm.adv_estimator") == "gae" if critic is None else critic,
        "actor_rollout_ref.ref": _get(config, "actor_rollout_ref.actor.use_kl_loss")
        or _get(config, "algorithm.use_kl_in_reward"),
    }
    for flag, budget, parallel in _BUDGETS:
        if (
            used.get(flag.rpartition(".")[0], True)
            and _get(config, flag)
            and _get(config, budget) * _get(config, parallel) < prompt + response
        ):
            raise ValueError(
                f"rl.verl.overrides: {budget} ({_get(config, budget)}) times {parallel} "
                f"({_get(config, parallel)}) must hold max_prompt_length + max_response_length "
                f"({prompt} + {response} = {prompt + response}) with {flag}: raise {budget}"
            )


def _check_gpus(config: dict) -> None:
    """verl splits a step's batch (train_batch_size x rollout.n sequences) evenly over the GPUs."""
    batch, n = _get(config, "data.train_batch_size"), _get(config, "actor_rollout_ref.rollout.n")
    gpus = _get(config, "trainer.n_gpus_per_node") * _get(config, "trainer.nnodes")
    if (batch * n) % gpus:
        raise ValueError(
            f"rl.tasks_per_step x rl.rollouts_per_task ({batch} x {n} = {batch * n}) must divide "
            f"by the GPUs (rl.verl.gpus_per_node x rl.verl.nodes = {gpus}): verl splits each "
            "step's episodes evenly over them"
        )
