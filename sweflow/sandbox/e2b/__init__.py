"""The e2b backend: E2B, Tencent AgentSandbox, or sweflow's own E2B endpoint."""

from sweflow.sandbox.e2b.backend import E2BSandbox

__all__ = ["E2BSandbox"]
