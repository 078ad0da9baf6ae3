"""An E2B-compatible endpoint over local sandboxes (``sweflow sandbox serve-e2b``).

Code written for E2B or Tencent AgentSandbox runs offline against it with the real e2b SDK, and
sweflow's own ``e2b`` backend is tested end to end through it.
"""
