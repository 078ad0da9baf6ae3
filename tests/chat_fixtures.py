"""A tool-call conversation and a template that renders it, shared by the tests of training's
rendering (tests/training/test_training_chat.py) and of vLLM's
(tests/serving/test_serving_vllm.py)."""

from __future__ import annotations

import json

# A template that writes tool calls with `tojson`, as Qwen2.5's does (written for this test).
TOJSON_TEMPLATE = """\
{%- for m in messages -%}
<|im_start|>{{ m.role }}
{% if m.content %}{{ m.content }}{% endif %}
{%- for c in m.tool_calls or [] %}
<tool_call>
{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif -%}"""
CALL = {
    "id": "c1",
    "type": "function",
    "function": {"name": "bash", "arguments": json.dumps({"command": "ls -la"})},
}
CONVERSATION = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": "Fix it."},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "setup.py"},
    {"role": "assistant", "content": "Done.", "tool_calls": []},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object"},
        },
    }
]
