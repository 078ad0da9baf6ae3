"""sweflow.instances: the task record, every loader and writer, on real files and real datasets.

The fixture rows (tests/data/instances/swebench_rows.jsonl) are shaped like the HF SWE-bench
rows: FAIL_TO_PASS/PASS_TO_PASS as JSON strings, real-looking diffs, and one swebench-5 row
(psf/requests) carrying image, eval_script, log_parser, eval_type and image_assets.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweflow.errors import SweflowError
from sweflow.instances import (
    Instance,
    InstancesError,
    LoadResult,
    load_instances,
    load_task_repo,
    to_rows,
    write_jsonl,
    write_parquet,
)

FIXTURE = Path(__file__).parents[1] / "data" / "instances" / "swebench_rows.jsonl"
IDS = ["astropy__astropy-12907", "sympy__sympy-20590", "psf__requests-2317"]


@pytest.fixture(autouse=True)
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """load_dataset caches what it reads: keep that cache inside the test's tmp dir."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")


@pytest.fixture
def rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


@pytest.fixture
def gold() -> list[Instance]:
    result = load_instances(FIXTURE)
    assert result.errors == []
    return result.instances


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def row(iid: str, **fields) -> str:
    """A JSONL line of a minimal valid row, with ``fields`` overriding or adding."""
    return json.dumps({"instance_id": iid, "repo": "o/r", "base_commit": "a" * 40, **fields})


# -- the record --------------------------------------------------------------------------------


def test_fixture_rows_load_with_every_field(gold: list[Instance]) -> None:
    assert [i.instance_id for i in gold] == IDS
    astropy, sympy, requests = gold
    assert astropy.repo == "astropy/astropy" and astropy.version == "4.3"
    assert astropy.FAIL_TO_PASS == [
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model6-result6]",
        "astropy/modeling/tests/test_separable.py::test_separable[compound_model9-result9]",
    ]
    assert astropy.patch.startswith("diff --git a/astropy/modeling/separable.py")
    assert astropy.image is None and astropy.eval_script is None and astropy.model_extra == {}
    assert sympy.hints_text.startswith("I've bisected") and sympy.PASS_TO_PASS[0] == "test__aresame"
    assert requests.log_parser == "parse_log_pytest" and requests.eval_type == "pass_and_fail"
    assert ": '>>>>> Start Test Output'" in (requests.eval_script or "")
    assert requests.model_extra == {"image_assets": "{}"}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ('["a::t1", "a::t2"]', ["a::t1", "a::t2"]),
        (["a::t1", "a::t2"], ["a::t1", "a::t2"]),
        ("[]", []),
        (None, []),
    ],
)
def test_test_lists_accept_json_strings_and_lists(given, expected) -> None:
    inst = Instance(instance_id="o__r-1", repo="o/r", base_commit="abc", FAIL_TO_PASS=given)
    assert inst.FAIL_TO_PASS == expected and inst.PASS_TO_PASS == []


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("1.10", "1.10"),
        (0.2, "0.2"),
        (3, "3"),
        (2022.03, "2022.03"),
        (1.10, "1.1"),  # a float cannot remember its trailing zero: quote versions in files
        (None, None),
    ],
)
def test_version_is_text(given, expected) -> None:
    inst = Instance(instance_id="o__r-1", repo="o/r", base_commit="abc", version=given)
    assert inst.version == expected


def test_nulls_become_defaults_and_timestamps_become_iso_text() -> None:
    inst = Instance.model_validate(
        {
            "instance_id": "o__r-1",
            "repo": "o/r",
            "base_commit": "abc",
            "hints_text": None,
            "patch": None,
            "created_at": dt.datetime(2022, 3, 3, 15, 14, 54, tzinfo=dt.UTC),
        }
    )
    assert inst.hints_text == "" and inst.patch == ""
    assert inst.created_at == "2022-03-03T15:14:54+00:00"


def test_to_row_writes_the_hf_convention(gold: list[Instance], rows: list[dict]) -> None:
    requests = gold[2]
    out = requests.to_row()
    assert out == rows[2]  # the HF row, byte for byte: JSON-string test lists, extras kept
    assert isinstance(out["FAIL_TO_PASS"], str)
    listed = requests.to_row(lists=True)
    assert listed["FAIL_TO_PASS"] == [
        "test_requests.py::RequestsTestCase::test_HTTP_302_ALLOW_REDIRECT_GET"
    ]
    assert Instance.model_validate(out) == Instance.model_validate(listed) == requests


def test_extra_fields_are_kept_through_every_writer(tmp_path: Path) -> None:
    """A SWE-smith row: no version, its own columns (image_name), a list-valued extra."""
    smith = {
        "instance_id": "pandas-dev__pandas.95280573.pr_53855",
        "repo": "swesmith/pandas-dev__pandas.95280573",
        "base_commit": "c1be2d5d2bb27d5f1a5b9ea6cf9bc3a7b8c9d0e1",
        "image_name": "jyangballin/swesmith.x86_64.pandas-dev_1776_pandas.95280573",
        "FAIL_TO_PASS": ["pandas/tests/io/test_common.py::test_is_fsspec_url"],
        "tags": ["pr_mirror", "lm_rewrite"],
    }
    inst = Instance.model_validate(smith)
    assert inst.version is None
    assert inst.model_extra == {"image_name": smith["image_name"], "tags": smith["tags"]}
    for path, write in (
        (tmp_path / "s.jsonl", write_jsonl),
        (tmp_path / "s.parquet", write_parquet),
    ):
        write([inst], path)
        assert load_instances(path).instances == [inst]


def test_invalid_eval_type_is_an_error() -> None:
    with pytest.raises(ValueError, match="eval_type"):
        Instance(instance_id="o__r-1", repo="o/r", base_commit="abc", eval_type="sometimes")


# -- bad rows, duplicates, filtering -----------------------------------------------------------


def test_bad_rows_are_reported_and_the_others_load(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "mixed.jsonl",
        row("o__r-1"),
        json.dumps({"repo": "o/r", "base_commit": "abc"}),  # no instance_id
        row("o__r-3", FAIL_TO_PASS="test_a, test_b"),  # not JSON
        row("o__r-4", patch=123),  # wrong type
        "",  # blank lines are not rows
        '{"instance_id": "o__r-5", "repo": ',  # a truncated line
        "[1, 2]",  # not an object
        row("o__r-7", FAIL_TO_PASS='{"a": 1}'),  # JSON, but not a list
        row("o__r-8"),
    )
    result = load_instances(path)
    assert [i.instance_id for i in result.instances] == ["o__r-1", "o__r-8"]
    got = [(e.index, e.instance_id, e.field) for e in result.errors]
    assert got == [
        (1, None, "instance_id"),
        (2, "o__r-3", "FAIL_TO_PASS"),
        (3, "o__r-4", "patch"),
        (4, None, None),
        (5, None, None),
        (6, "o__r-7", "FAIL_TO_PASS"),
    ]
    by_index = {e.index: e for e in result.errors}
    assert by_index[1].message == "Field required"
    assert "not a JSON list of test names" in by_index[2].message
    assert "valid string" in by_index[3].message
    assert "line 6" in by_index[4].message and "not valid JSON" in by_index[4].message
    assert str(by_index[2]) == (
        f"{path}: row 2 (o__r-3): FAIL_TO_PASS: Value error, not a JSON list of test names: "
        "Expecting value: line 1 column 1 (char 0)"
    )
    with pytest.raises(InstancesError, match=r"6 bad task row\(s\)") as info:
        result.raise_for_errors()
    assert isinstance(info.value, SweflowError) and "row 3 (o__r-4): patch" in str(info.value)


def test_a_duplicate_is_reported_naming_both_rows_and_the_first_kept(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "dup.jsonl",
        row("o__r-1", version="1.0"),
        row("o__r-2"),
        row("o__r-1", version="2.0"),
    )
    result = load_instances(path)
    assert [(i.instance_id, i.version) for i in result.instances] == [
        ("o__r-1", "1.0"),
        ("o__r-2", None),
    ]
    [err] = result.errors
    assert (err.index, err.instance_id, err.field) == (2, "o__r-1", "instance_id")
    assert "duplicate of row 0" in err.message


def test_filter_by_instance_ids(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "f.jsonl",
        *(line.strip() for line in FIXTURE.read_text().splitlines()),
        row("o__r-bad", patch=1),  # a bad row nobody asked for: not this run's problem
        '{"broken',  # a row whose id cannot be read: it might be a requested one
        row("o__r-asked-bad", patch=1),
    )
    wanted = [
        "psf__requests-2317",
        "astropy__astropy-12907",
        "django__django-99999",
        "o__r-asked-bad",
    ]
    result = load_instances(path, instances=wanted)
    assert [i.instance_id for i in result.instances] == [
        "astropy__astropy-12907",
        "psf__requests-2317",
    ]
    got = [(e.index, e.instance_id, e.field) for e in result.errors]
    assert got == [
        (4, None, None),
        (5, "o__r-asked-bad", "patch"),
        (None, "django__django-99999", "instance_id"),
    ]
    assert (
        str(result.errors[-1])
        == f"{path} (django__django-99999): instance_id: requested, but no row has this id"
    )
    one = load_instances(path, instances="sympy__sympy-20590")  # a lone id, not its characters
    assert [i.instance_id for i in one.instances] == ["sympy__sympy-20590"]
    assert [e.index for e in one.errors] == [4]  # the unreadable row might have been it


# -- JSON, JSONL, parquet ----------------------------------------------------------------------


def test_json_list_object_and_single_row(tmp_path: Path, rows: list[dict]) -> None:
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps(rows, indent=2))
    assert [i.instance_id for i in load_instances(as_list).instances] == IDS

    keyed = {r["instance_id"]: {k: v for k, v in r.items() if k != "instance_id"} for r in rows}
    keyed["sympy__sympy-20590"]["instance_id"] = "sympy__sympy-20590"  # agreeing is fine
    keyed["misfiled"] = dict(rows[0])  # says astropy__astropy-12907, stored under misfiled
    as_object = tmp_path / "object.json"
    as_object.write_text(json.dumps(keyed))
    result = load_instances(as_object)
    assert [i.instance_id for i in result.instances] == IDS
    [err] = result.errors
    assert (err.index, err.instance_id, err.field) == (3, "misfiled", "instance_id")
    assert "stored under 'misfiled'" in err.message

    single = tmp_path / "one.json"
    single.write_text(json.dumps(rows[1]))
    assert [i.instance_id for i in load_instances(single).instances] == [IDS[1]]


def test_json_lines_under_a_json_name_as_datasets_writes_them(tmp_path: Path, rows) -> None:
    path = tmp_path / "exported.json"
    datasets.Dataset.from_list(rows).to_json(path)
    result = load_instances(path)
    assert result.errors == [] and [i.instance_id for i in result.instances] == IDS


def test_unreadable_json_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"instance_id": "o__r-1",\n   "repo": "o/r",,\n  }\n]\n')
    with pytest.raises(InstancesError, match=rf"{path}:3:\d+: not valid JSON"):
        load_instances(path)
    path.write_text('"just a string"')
    with pytest.raises(InstancesError, match="expected a list of task rows, got str"):
        load_instances(path)


def test_missing_sources_name_the_path(tmp_path: Path) -> None:
    for missing in (
        tmp_path / "nope.jsonl",
        tmp_path / "nope",
        str(tmp_path / "x.parquet"),
        "./rel",
    ):
        with pytest.raises(InstancesError, match="no such file or directory") as info:
            load_instances(missing)
        assert str(missing).lstrip("./") in str(info.value)
    odd = tmp_path / "tasks.csv"
    odd.write_text("instance_id\n")
    with pytest.raises(InstancesError, match=r"tasks\.csv: unknown task file type '\.csv'"):
        load_instances(odd)
    (tmp_path / "bad.parquet").write_text("not parquet")
    with pytest.raises(InstancesError, match="bad.parquet: not a readable parquet file"):
        load_instances(tmp_path / "bad.parquet")


def test_jsonl_round_trip(tmp_path: Path, gold: list[Instance]) -> None:
    gold[1].problem_statement += "a line separator\u2028inside the text\n"
    first = write_jsonl(gold, tmp_path / "out" / "a.jsonl")
    again = load_instances(first)
    assert again.errors == [] and again.instances == gold
    write_jsonl(again.instances, tmp_path / "out" / "b.jsonl")
    assert (tmp_path / "out" / "b.jsonl").read_bytes() == first.read_bytes()
    assert json.loads(first.read_text().splitlines()[0])["FAIL_TO_PASS"].startswith('["astropy/')
    listed = write_jsonl(gold, tmp_path / "out" / "lists.jsonl", lists=True)
    assert isinstance(json.loads(listed.read_text().splitlines()[0])["FAIL_TO_PASS"], list)
    assert load_instances(listed).instances == gold
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "a.jsonl",
        "b.jsonl",
        "lists.jsonl",
    ]
    assert first.stat().st_mode & 0o777 == 0o644


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, gold) -> None:
    path = write_jsonl(gold, tmp_path / "d.jsonl")
    before = path.read_bytes()
    unwritable = Instance(instance_id="o__r-1", repo="o/r", base_commit="abc", blob=object())
    with pytest.raises(InstancesError, match="cannot write o__r-1"):
        write_jsonl([*gold, unwritable], path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["d.jsonl"]


def test_parquet_round_trip(tmp_path: Path, gold: list[Instance]) -> None:
    path = write_parquet(gold, tmp_path / "test.parquet")
    table = pq.read_table(path)
    assert table.schema.field("FAIL_TO_PASS").type == pa.string()
    assert table.column("image_assets").to_pylist() == [None, None, "{}"]
    again = load_instances(path)
    assert again.errors == []
    # a row that lacked an extra column reads it back as null; every declared field round-trips
    assert [i.model_dump(exclude={"image_assets"}) for i in again.instances] == [
        i.model_dump(exclude={"image_assets"}) for i in gold
    ]
    assert again.instances[2] == gold[2]
    listed = write_parquet(gold[:2], tmp_path / "lists.parquet", lists=True)
    assert pq.read_table(listed).schema.field("PASS_TO_PASS").type == pa.list_(pa.string())
    assert load_instances(listed).instances == gold[:2]


def test_parquet_refuses_a_column_of_mixed_types(tmp_path: Path) -> None:
    mixed = [
        Instance(instance_id=f"o__r-{n}", repo="o/r", base_commit="abc", difficulty=value)
        for n, value in enumerate((1, "hard"))
    ]
    with pytest.raises(InstancesError, match=r"m\.parquet: cannot write parquet \(mixed types"):
        write_parquet(mixed, tmp_path / "m.parquet")
    assert list(tmp_path.iterdir()) == []


def test_parquet_timestamps_and_filters(tmp_path: Path, rows: list[dict]) -> None:
    rows[0]["created_at"] = dt.datetime(2022, 3, 3, 15, 14, 54, tzinfo=dt.UTC)
    rows[1]["created_at"] = dt.datetime(2020, 12, 12, 18, 18, 38, tzinfo=dt.UTC)
    path = tmp_path / "ts.parquet"
    pq.write_table(pa.Table.from_pylist(rows[:2]), path)
    result = load_instances(path, instances=[IDS[0]])
    assert [i.created_at for i in result.instances] == ["2022-03-03T15:14:54+00:00"]


# -- Hugging Face datasets ---------------------------------------------------------------------


def test_hf_save_to_disk_round_trip(tmp_path: Path, gold: list[Instance]) -> None:
    ds = datasets.Dataset.from_list(to_rows(gold))
    ds.save_to_disk(tmp_path / "saved")
    result = load_instances(tmp_path / "saved")
    assert result.errors == []
    assert [i.instance_id for i in result.instances] == IDS
    assert result.instances[2] == gold[2]
    assert [i.to_row()["FAIL_TO_PASS"] for i in result.instances] == [
        i.to_row()["FAIL_TO_PASS"] for i in gold
    ]


def test_hf_dataset_dict_needs_a_split_when_it_has_several(tmp_path: Path, gold) -> None:
    rows = to_rows(gold)
    dd = datasets.DatasetDict(
        {"test": datasets.Dataset.from_list(rows[:2]), "dev": datasets.Dataset.from_list(rows[2:])}
    )
    dd.save_to_disk(tmp_path / "dd")
    assert [i.instance_id for i in load_instances(tmp_path / "dd", "dev").instances] == [IDS[2]]
    with pytest.raises(InstancesError, match="has splits test, dev: choose one"):
        load_instances(tmp_path / "dd")
    with pytest.raises(InstancesError, match="has splits test, dev"):
        load_instances(tmp_path / "dd", "train")
    # the swebench layout of one save_to_disk folder per split: <name>/<split>/
    datasets.Dataset.from_list(rows[:1]).save_to_disk(tmp_path / "per-split" / "test")
    assert [i.instance_id for i in load_instances(tmp_path / "per-split", "test").instances] == [
        IDS[0]
    ]


def test_hf_dataset_from_a_folder_of_data_files(tmp_path: Path, gold: list[Instance]) -> None:
    """What load_dataset(name, split=...) does for a hub dataset, on a local folder of files."""
    folder = tmp_path / "SWE-bench_Local"
    folder.mkdir()
    write_parquet(gold[:2], folder / "test.parquet")
    write_parquet(gold[2:], folder / "dev.parquet")
    result = load_instances(folder, "test", instances=[IDS[1]])
    assert result.errors == [] and [i.instance_id for i in result.instances] == [IDS[1]]
    assert result.instances[0].model_dump(exclude={"image_assets"}) == gold[1].model_dump()

    jsonl = tmp_path / "jsonl_dataset"
    jsonl.mkdir()
    write_jsonl(gold[:2], jsonl / "train.jsonl")
    result = load_instances(jsonl)  # one split: no need to name it
    assert [i.instance_id for i in result.instances] == IDS[:2]
    with pytest.raises(InstancesError, match=r"cannot load dataset .*jsonl_dataset.* split 'test'"):
        load_instances(jsonl, "test")


@pytest.fixture
def offline_hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty Hugging Face hub cache of this test's own, with the hub unreachable."""
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_hub_name_not_in_the_cache_fails_clearly(offline_hub: Path) -> None:
    """Offline here: the hub is never reached, and the error says what to do."""
    with pytest.raises(InstancesError, match="SWE-bench/SWE-bench_Nope: not in the Hugging Face"):
        load_instances("SWE-bench/SWE-bench_Nope", "test")


def test_a_hub_name_is_read_from_the_cache_offline(offline_hub: Path, gold: list) -> None:
    """org/name[@revision][:split] from a hub cache laid out as huggingface_hub lays it out:
    refs/<branch> -> snapshots/<commit>/<files>."""
    repo = offline_hub / "datasets--org--tasks"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    write_jsonl(gold[:2], repo / "snapshots" / commit / "data" / "test.jsonl")
    write_jsonl(gold[2:3], repo / "snapshots" / commit / "data" / "train.jsonl")
    assert [i.instance_id for i in load_instances("org/tasks:test").instances] == IDS[:2]
    assert [i.instance_id for i in load_instances("org/tasks", "train").instances] == IDS[2:3]
    pinned = load_instances(f"org/tasks@{commit}:train").instances
    assert [i.instance_id for i in pinned] == IDS[2:3]
    with pytest.raises(InstancesError, match="names split 'test' but split 'train'"):
        load_instances("org/tasks:test", "train")
    with pytest.raises(InstancesError, match="org/tasks@v9:test: not in the Hugging Face cache"):
        load_instances("org/tasks@v9:test")


# -- swebench-5 task repos ---------------------------------------------------------------------


def make_task(root: Path, inst: Instance, *, meta_name: str = "task.yaml", **meta_extra) -> Path:
    """A task folder the way swebench 5 lays it out (swebench/task/repo.py)."""
    import yaml

    folder = root / inst.instance_id
    folder.mkdir(parents=True)
    meta = {
        k: v
        for k, v in inst.to_row(lists=True).items()
        if k not in ("patch", "test_patch", "eval_script", "problem_statement", "hints_text")
        and k not in ("FAIL_TO_PASS", "PASS_TO_PASS")
        and v is not None
    }
    meta.update(meta_extra)
    text = json.dumps(meta) if meta_name.endswith(".json") else yaml.safe_dump(meta)
    (folder / meta_name).write_text(text)
    tests = {"FAIL_TO_PASS": inst.FAIL_TO_PASS, "PASS_TO_PASS": inst.PASS_TO_PASS}
    (folder / "tests.json").write_text(json.dumps(tests, indent=2))
    files = {
        "gold.patch": inst.patch,
        "test.patch": inst.test_patch,
        "problem_statement.md": inst.problem_statement,
        "hints.md": inst.hints_text,
        "eval.sh": inst.eval_script,
    }
    for name, content in files.items():
        if content:
            (folder / name).write_bytes(content.encode())
    return folder


def test_task_repo(tmp_path: Path, gold: list[Instance]) -> None:
    repo = tmp_path / "task-repo"
    (repo / "tasks").mkdir(parents=True)
    (repo / "sweb.yaml").write_text("datasets: [SWE-bench/Local]\nsplits: [test]\n")
    gold[0].patch = gold[0].patch.replace("\n", "\r\n")  # CRLF inside a patch must survive
    for inst in gold:
        make_task(repo / "tasks", inst, split="test")
    result = load_instances(repo)
    assert result.errors == []
    assert [i.instance_id for i in result.instances] == sorted(IDS)
    loaded = {i.instance_id: i for i in result.instances}
    for inst in gold:
        assert loaded[inst.instance_id].model_dump(exclude={"split"}) == inst.model_dump()
    assert loaded[IDS[2]].eval_script == gold[2].eval_script  # eval.sh filled eval_script
    assert loaded[IDS[0]].eval_script is None and "\r\n" in loaded[IDS[0]].patch
    assert loaded[IDS[1]].model_extra == {"split": "test"}


def test_task_repo_splits_ids_and_bad_tasks(tmp_path: Path, gold: list[Instance]) -> None:
    root = tmp_path / "tasks-here"  # task folders directly under the folder, no tasks/
    make_task(root, gold[0], split="test")
    make_task(root, gold[1], split="deprecated")
    make_task(root, gold[2], meta_name="task.json")  # no split field: in every split
    (root / gold[2].instance_id / "task.json").write_text(
        json.dumps(
            {
                k: v
                for k, v in json.loads((root / IDS[2] / "task.json").read_text()).items()
                if k != "instance_id"
            }
        )
    )
    broken = root / "o__r-yaml"
    broken.mkdir()
    (broken / "task.yaml").write_text("repo: o/r\nbase_commit: [unclosed\n")
    misnamed = make_task(root, Instance(instance_id="o__r-2", repo="o/r", base_commit="abc"))
    misnamed.rename(root / "o__r-misnamed")
    bad_tests = make_task(root, Instance(instance_id="o__r-3", repo="o/r", base_commit="abc"))
    (bad_tests / "tests.json").write_text('{"FAIL_TO_PASS": ["t1",\n]}')
    (root / "notes").mkdir()  # a folder without a task file is not a task

    result = load_instances(root, "test")
    assert [i.instance_id for i in result.instances] == [IDS[0], IDS[2]]
    errors = {e.instance_id: e for e in result.errors}
    assert set(errors) == {"o__r-3", "o__r-misnamed", "o__r-yaml"}
    assert errors["o__r-yaml"].message.startswith("task.yaml is not valid YAML")
    assert errors["o__r-yaml"].source == str(broken)
    assert errors["o__r-misnamed"].field == "instance_id"
    assert errors["o__r-3"].message.startswith("tests.json:2:1: not valid JSON")
    assert [i.instance_id for i in load_instances(root).instances] == sorted(IDS)
    only = load_task_repo(root, instances=["psf__requests-2317"])
    assert only.errors == [] and only.instances[0].eval_script == gold[2].eval_script


def test_folder_with_tasks_jsonl(tmp_path: Path, gold: list[Instance]) -> None:
    write_jsonl(gold, tmp_path / "ds" / "tasks.jsonl")
    result: LoadResult = load_instances(tmp_path / "ds", "test")
    assert result.raise_for_errors() == gold
