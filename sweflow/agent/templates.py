"""The default prompts, as ``string.Template`` text (``$name``), so code and JSON in them need no
escaping. Fields: ``$workdir``, ``$repo``, ``$instance_id``, ``$problem_statement`` and
``$format_instructions`` (what a reply must look like in the chosen tool mode), which is made
from the registered tools (sweflow.agent.tools): their names, briefs and text-form examples.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from string import Template
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sweflow.agent.tools import Tool

SYSTEM_TEMPLATE = """\
You are a careful software engineer working in a Linux shell on the repository at $workdir.
You fix the issue you are given by editing the repository's source files.

$format_instructions

Work step by step: find the relevant code, reproduce the problem if you can, edit the source,
check your change, then submit. Do not edit the tests. The shell keeps its state between
commands (cd, export). Interactive programs (editors, pagers, `python` without a script) do
not work. Every command has a time limit."""

TEXT_INSTRUCTIONS = """\
Every reply has a short thought and exactly ONE bash code block, like this:

THOUGHT: I should look at the files first.

```bash
ls -la
```

The command runs and you get its output. Instead of a shell command, the block may hold one
file viewer/editor command (arguments in shell quoting):

$text_examples

To finish, reply with a block whose only command is `$finish`."""


def tools_instructions(tools: Sequence[Tool]) -> str:
    """What a reply must look like in tools mode: each tool named with its brief."""
    briefs = [f"`{tool.name}` {tool.brief}" for tool in tools]
    listed = ", ".join(briefs[:-1]) + f", and {briefs[-1]}" if len(briefs) > 1 else briefs[0]
    return textwrap.fill(f"Use the tools: {listed}. Call exactly one tool per reply.", 96)


def text_instructions(tools: Sequence[Tool]) -> str:
    """What a reply must look like in text mode: one code block, the tools' text forms."""
    examples = "\n".join(line for tool in tools for line in tool.text_examples)
    finish = next(tool.name for tool in tools if tool.ends_run)
    return render(TEXT_INSTRUCTIONS, text_examples=examples, finish=finish)


TASK_TEMPLATE = """\
<issue>
$problem_statement
</issue>

The repository is checked out at $workdir. Make the minimal change to its non-test files that
resolves the issue above, then submit."""


def render(template: str, **fields: str) -> str:
    """Fill ``$name`` fields; unknown ``$words`` stay as they are (a problem text may hold $)."""
    return Template(template).safe_substitute(fields)


DEMONSTRATION = """

Here is a whole solved task, as an example of the replies and of what the shell answers. The
task you are given after it is another one.

<example>
$transcript
</example>"""


def demonstration(messages: Sequence[Mapping[str, Any]], max_output: int = 1500) -> str:
    """A solved text-mode run (its task, replies and outputs; the system prompt left out) as
    text a system prompt can end with: the few-shot prompt of a model that has not learned the
    reply format (each output cut to ``max_output`` characters)."""
    parts = []
    for message in messages:
        role, content = message["role"], str(message.get("content") or "")
        if role == "system":
            continue
        if role != "assistant" and parts:
            cut = content if len(content) <= max_output else content[:max_output] + "\n[...]"
            content = f"OUTPUT:\n{cut}"
        parts.append(content)
    return render(DEMONSTRATION, transcript="\n\n".join(parts))
