"""Environment specs: loading YAML/JSON spec tables, errors, env_digest and the test command."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from sweflow.harness.specs import (
    EnvSpec,
    SpecError,
    SpecTable,
    load_specs,
)
from sweflow.harness.specs import test_command as build_test_command

YAML_SPECS = """\
psf/requests:
  0.20:
    python: 3.10
    packages: pytest
    pip_packages: [urllib3<2, "idna==3.4"]
    pre_install: ["apt-get install -y libssl-dev"]
    install: python -m pip install -e .
    test_cmd: pytest -rA
    eval_commands: ["export LANG=C.UTF-8"]
    env_vars: {PYTHONHASHSEED: 0, DEBUG: yes}
  0.9:
    python: "3.9"
    packages: requirements.txt
    test_cmd: pytest
  1.0:
    extends: 0.20
    pip_packages: [urllib3>=2]
  2:
    python: "3.11"
    test_cmd: [make build, make test]
pallets/flask:
  "2.0": {python: "3.9", test_cmd: pytest}
"""


@pytest.fixture
def yaml_table(tmp_path: Path) -> SpecTable:
    path = tmp_path / "specs.yaml"
    path.write_text(YAML_SPECS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_specs(path)


def write(tmp_path: Path, text: str, name: str = "specs.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_numbers_keep_the_text_written(yaml_table: SpecTable) -> None:
    assert yaml_table.versions("psf/requests") == ["0.9", "0.20", "1.0", "2"]
    spec = yaml_table.get("psf/requests", "0.20")
    assert spec.python == "3.10"  # not 3.1
    assert spec.env_vars == {"PYTHONHASHSEED": "0", "DEBUG": "yes"}
    assert spec.pip_packages == ["urllib3<2", "idna==3.4"]
    assert spec.pre_install == ["apt-get install -y libssl-dev"]
    assert spec.install == "python -m pip install -e ."
    assert spec.eval_commands == ["export LANG=C.UTF-8"]
    assert spec.packages_file is None
    assert yaml_table.get("psf/requests", "0.9").packages_file == "requirements.txt"


def test_json_specs(tmp_path: Path) -> None:
    data = '{"psf/requests": {"0.20": {"python": 3.9, "test_cmd": "pytest", "pip_packages": []}}}'
    table = load_specs(write(tmp_path, data, "specs.json"))
    assert table.versions("psf/requests") == ["0.20"]
    assert table.get("psf/requests", "0.20").python == "3.9"


def test_python_mapping_numeric_versions() -> None:
    table = SpecTable.from_mapping({"a/b": {0.2: {"python": "3.9"}, 3: {"python": "3.8"}}})
    assert table.versions("a/b") == ["0.2", "3"]


def test_extends_takes_the_base_keys_and_replaces_its_own(yaml_table: SpecTable) -> None:
    derived = yaml_table.get("psf/requests", "1.0")
    base = yaml_table.get("psf/requests", "0.20")
    assert derived.pip_packages == ["urllib3>=2"]
    assert derived.model_dump(exclude={"pip_packages"}) == base.model_dump(exclude={"pip_packages"})


def test_extends_errors(tmp_path: Path) -> None:
    cycle = 'a/b:\n  "1": {extends: "2", python: "3.9"}\n  "2": {extends: "1"}\n'
    with pytest.raises(SpecError, match=r"cycle \(1 -> 2 -> 1\)"):
        load_specs(write(tmp_path, cycle))
    unknown = 'a/b:\n  "1": {extends: "0.5", python: "3.9"}\n  "2": {python: "3.9"}\n'
    with pytest.raises(SpecError, match=r"extends unknown version '0.5' \(versions known: 1, 2\)"):
        load_specs(write(tmp_path, unknown))


def test_unknown_key_names_repo_version_and_key(tmp_path: Path) -> None:
    text = 'psf/requests:\n  "2.0": {python: "3.9", no_use_env: true}\n'
    with pytest.raises(SpecError) as err:
        load_specs(write(tmp_path, text))
    message = str(err.value)
    assert "psf/requests" in message and "'2.0'" in message
    assert "unknown key 'no_use_env'" in message and "known keys: python" in message


def test_missing_python_and_bad_values(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"a/b version '1'.*missing required key 'python'"):
        load_specs(write(tmp_path, 'a/b: {"1": {test_cmd: pytest}}\n'))
    with pytest.raises(SpecError, match=r"python: String should match pattern"):
        load_specs(write(tmp_path, 'a/b: {"1": {python: "three"}}\n'))
    with pytest.raises(SpecError, match=r"pip_packages: Input should be a valid list"):
        load_specs(write(tmp_path, 'a/b: {"1": {python: "3.9", pip_packages: pytest}}\n'))
    with pytest.raises(SpecError, match=r'"owner/name"'):
        load_specs(write(tmp_path, 'requests: {"1": {python: "3.9"}}\n'))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"cannot read specs file .*absent.yaml"):
        load_specs(tmp_path / "absent.yaml")
    with pytest.raises(SpecError, match=r"bad.yaml is not valid YAML"):
        load_specs(write(tmp_path, "a/b: [unclosed\n", "bad.yaml"))
    with pytest.raises(SpecError, match=r"bad.json is not valid JSON"):
        load_specs(write(tmp_path, "{", "bad.json"))
    with pytest.raises(SpecError, match=r"expected a mapping of repo"):
        load_specs(write(tmp_path, "- a\n- b\n", "list.yaml"))


def test_get_errors_list_what_is_known(yaml_table: SpecTable) -> None:
    with pytest.raises(SpecError) as err:
        yaml_table.get("psf/requests", "3.0")
    assert str(err.value) == (
        "no environment spec for psf/requests version '3.0' (versions known: 0.9, 0.20, 1.0, 2)"
    )
    with pytest.raises(SpecError, match=r"repos with specs: pallets/flask, psf/requests"):
        yaml_table.get("django/django", "3.0")


def test_merge_later_tables_win(yaml_table: SpecTable) -> None:
    other = SpecTable.from_mapping(
        {"psf/requests": {"2": {"python": "3.12"}, "3.0": {"python": "3.12"}}, "x/y": {}}
    )
    merged = yaml_table.merge(other)
    assert merged.get("psf/requests", "2").python == "3.12"
    assert merged.get("psf/requests", "0.9").python == "3.9"
    assert merged.versions("psf/requests") == ["0.9", "0.20", "1.0", "2", "3.0"]
    assert yaml_table.get("psf/requests", "2").python == "3.11"  # the original is unchanged


def test_env_digest_covers_the_environment_layer_only() -> None:
    spec = EnvSpec(python="3.9", packages="pytest", pip_packages=["a==1"], env_vars={"A": "1"})
    same_env = spec.model_copy(
        update={"install": "pip install .", "test_cmd": "pytest -x", "eval_commands": ["true"]}
    )
    assert same_env.env_digest() == spec.env_digest()
    assert len(spec.env_digest()) == 64
    for change in (
        {"pip_packages": ["a==2"]},
        {"python": "3.10"},
        {"packages": "pytest mock"},
        {"pre_install": ["apt-get install -y gcc"]},
        {"env_vars": {"A": "2"}},
    ):
        assert spec.model_copy(update=change).env_digest() != spec.env_digest(), change


def test_env_digest_ignores_how_the_file_was_written(tmp_path: Path) -> None:
    one = load_specs(write(tmp_path, 'a/b: {"1": {python: "3.9", env_vars: {X: "1", Y: "2"}}}\n'))
    two = {"a/b": {"1": {"env_vars": {"Y": "2", "X": "1"}, "python": "3.9", "test_cmd": "x"}}}
    other = load_specs(write(tmp_path, json.dumps(two), "specs.json"))
    assert one.get("a/b", "1").env_digest() == other.get("a/b", "1").env_digest()


def test_test_command_like_the_harness(yaml_table: SpecTable) -> None:
    spec = yaml_table.get("psf/requests", "0.20")
    files = ["tests/test_a.py", "tests/test_b.py"]
    assert build_test_command(spec, files) == "pytest -rA tests/test_a.py tests/test_b.py"
    assert build_test_command(spec, []) == "pytest -rA"
    listed = yaml_table.get("psf/requests", "2")
    assert build_test_command(listed, files) == "make build\nmake test"
    with pytest.raises(SpecError, match="no test_cmd"):
        build_test_command(EnvSpec(python="3.9"), files)
