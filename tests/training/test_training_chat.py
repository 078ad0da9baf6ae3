"""Conversations rendered for training exactly as vLLM's chat endpoint renders them: tool-call
arguments reach the template as objects (never JSON encoded twice), empty tool-call lists are
dropped, and a template that drops tool calls is refused by name instead of training replies
that carry no action."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chat_fixtures import CONVERSATION, TOJSON_TEMPLATE, TOOLS
from typer.testing import CliRunner

from sweflow.cli import app
from sweflow.training.chat import ActionsLostError, ChatEncoder, as_vllm_renders


@pytest.fixture
def tojson_model(tiny_smollm2: Path, tmp_path: Path) -> Path:
    """SmolLM2's tokenizer with a template that renders tool calls."""
    folder = tmp_path / "tojson-model"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tiny_smollm2 / name).exists():
            shutil.copy(tiny_smollm2 / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(
        json.dumps({**config, "chat_template": TOJSON_TEMPLATE})
    )
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    return folder


def test_arguments_reach_the_template_as_objects(tojson_model: Path) -> None:
    encoder = ChatEncoder(tojson_model)
    text = encoder.render(CONVERSATION, TOOLS, prompt=False)
    assert '{"name": "bash", "arguments": {"command": "ls -la"}}' in text
    assert '\\"command\\"' not in text  # the string form, encoded a second time
    assert as_vllm_renders(CONVERSATION)[-1] == {"role": "assistant", "content": "Done."}
    encoded = encoder.encode(CONVERSATION, TOOLS)  # the call shows: nothing refused
    trained = encoder.tokenizer.decode(
        [t for t, k in zip(encoded.tokens, encoded.trained, strict=True) if k]
    )
    assert '"arguments": {"command": "ls -la"}' in trained


def test_a_template_that_drops_tool_calls_is_refused_by_name(tiny_smollm2: Path) -> None:
    encoder = ChatEncoder(tiny_smollm2)  # SmolLM2's template ignores tool_calls
    with pytest.raises(ActionsLostError, match=r"drops the tool calls of assistant turn 2 \(tools"):
        encoder.encode(CONVERSATION, TOOLS)
    text_mode = [*CONVERSATION[:2], {"role": "assistant", "content": "```bash\nls -la\n```"}]
    assert encoder.encode(text_mode).trained_tokens > 0


def test_sft_on_tool_calls_the_template_drops_names_the_model_and_mode(
    tiny_smollm2: Path, tmp_path: Path
) -> None:
    data = tmp_path / "sft.jsonl"
    data.write_text(
        json.dumps({"instance_id": "t-1", "messages": CONVERSATION, "tools": TOOLS}) + "\n"
    )
    result = CliRunner().invoke(
        app,
        ["train", "sft", "--data", str(data), "-m", str(tiny_smollm2), "-o", str(tmp_path / "out")],
    )
    assert result.exit_code != 0
    assert str(tiny_smollm2) in result.output and "--tool-mode text" in result.output
