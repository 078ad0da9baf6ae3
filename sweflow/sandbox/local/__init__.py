"""The container-free sandbox backend.

Threat model (docs/sandbox-security.md has it whole, with the test behind each point): the code
inside is hostile; sweflow, the layer builders and the C init are trusted. Root inside is an
unprivileged host identity: run as root, a range of 65536 host ids of the sandbox's own (from
2^31, or /etc/subuid's ``sweflow`` entry) with host uid 0 mapped to nothing (ids.py); run as a
user, that user alone. Layers and read-only binds are shifted onto the range with idmapped mounts,
so files keep their owners inside and a disk upper stores what root writes as disk uid 0; the
host's own / as a layer is not shifted, so its root-only files stay unreadable. A sandbox reaches
no file, process or cgroup of the host's root: not its limits (nor through a nested user and
cgroup namespace), not the host's cgroup tree; close() removes every cgroup it has, and ``sandbox
gc`` removes only sandboxes whose owner and keeper are gone, in any state directory (gc.py).
"""

from sweflow.sandbox.local.backend import LocalSandbox

__all__ = ["LocalSandbox"]
