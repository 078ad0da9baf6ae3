"""The SWE-bench harness's pieces, container-free: what an environment is made of (specs, in the
harness vocabulary), the eval script run in ``/testbed``, how a patch is applied, the run log.

Environments (sweflow.envcache) are built and validated from these, and grading
(sweflow.grading) runs them; both sit above this package.
"""
