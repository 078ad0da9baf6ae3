"""The default prompts, as ``string.Template`` text (``$name``), so code and JSON in them need no
escaping. Fields: ``$workdir``, ``$repo``, ``$instance_id``, ``$problem_statement`` and
``$format_instructions`` (what a reply must look like in the chosen tool mode).
"""

from __future__ import annotations

from string import Template

SYSTEM_TEMPLATE = """\
You are a careful software engineer working in a Linux shell on the repository at $workdir.
You fix the issue you are given by editing the repository's source files.

$format_instructions

Work step by step: find the relevant code, reproduce the problem if you can, edit the source,
check your change, then submit. Do not edit the tests. The shell keeps its state between
commands (cd, export). Interactive programs (editors, pagers, `python` without a script) do
not work. Every command has a time limit."""

TOOLS_INSTRUCTIONS = """\
Use the tools: `bash` runs a command, `str_replace_editor` views and edits files (view shows
line numbers), and `submit` ends the task with your changes. Call exactly one tool per reply."""

TEXT_INSTRUCTIONS = """\
Every reply has a short thought and exactly ONE bash code block, like this:

THOUGHT: I should look at the files first.

```bash
ls -la
```

The command runs and you get its output. Instead of a shell command, the block may hold one
file viewer/editor command (arguments in shell quoting):

str_replace_editor view /path/file.py --view_range '[10, 40]'
str_replace_editor str_replace /path/file.py --old_str 'exact old text' --new_str 'new text'
str_replace_editor create /path/new.py --file_text 'the content'
str_replace_editor insert /path/file.py --insert_line 12 --new_str 'text to insert'

To finish, reply with a block whose only command is `submit`."""

TASK_TEMPLATE = """\
<issue>
$problem_statement
</issue>

The repository is checked out at $workdir. Make the minimal change to its non-test files that
resolves the issue above, then submit."""


def render(template: str, **fields: str) -> str:
    """Fill ``$name`` fields; unknown ``$words`` stay as they are (a problem text may hold $)."""
    return Template(template).safe_substitute(fields)
