"""The trajectory inspector: a folder's runs as one HTML page, served on loopback or written
as a static file (``sweflow inspect``).

from sweflow.inspector import write_page
write_page(Path("runs/infer"), Path("runs/infer/inspector.html"))

The page (``page``) lists the runs in a table that sorts and filters, shows one run as its
steps (thought, action, observation, edits as diffs), its final patch, its grading's
FAIL_TO_PASS / PASS_TO_PASS outcome and the tamper guard's reason where it refused
(``verdicts``), and two runs of a task side by side; ``server`` serves it.
"""

from sweflow.inspector.page import page_data, render, write_page
from sweflow.inspector.server import InspectorServer, serve

__all__ = ["InspectorServer", "page_data", "render", "serve", "write_page"]
