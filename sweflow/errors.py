"""The base of sweflow's user-facing errors, and the line between refusal and retry.

Every error sweflow raises on purpose is a :class:`SweflowError`. Two branches say what a caller
(a Prefect retry policy, the RL trainer, a batch runner) should do with it:

- :class:`ConfigError`: the input cannot work (a bad spec, option or file). Retrying changes
  nothing; the message names what to fix.
- :class:`InfrastructureError`: the machinery failed (a sandbox that would not start or died, a
  model server that went away, a grading that hung). Worth another try, and never the fault of
  the patch or the policy being judged: a reward must not be 0 because of one.

Other SweflowErrors (a stage with nothing to work on, tests that fail) are results, not faults.
"""

from __future__ import annotations


class SweflowError(Exception):
    """An error the user can act on: a missing tool, a bad config, a sandbox that cannot start.

    Raise a subclass of it (never a bare RuntimeError) with a message that says what went wrong
    and what to do. The CLI prints such errors as one red ``error: <message>`` line and exits 2,
    without a traceback; anything else is a bug and keeps its traceback. Library callers catch
    ``SweflowError`` to tell "the environment is wrong" from "sweflow is wrong".
    """


class ConfigError(SweflowError):
    """Bad input (spec, option, config field, file): never retried."""


class InfrastructureError(SweflowError):
    """A failure of the machinery, not of the input or the work judged: worth retrying."""


def is_infrastructure(exc: BaseException) -> bool:
    """Whether ``exc`` is a failure worth retrying: ours, or the OS's (connections, timeouts).

    An OSError that is really bad input (a path that does not exist) is raised by sweflow as a
    ConfigError, so the OS errors left here are dropped connections, broken pipes and the like.
    """
    if isinstance(exc, ConfigError):
        return False
    return isinstance(exc, InfrastructureError | OSError | TimeoutError)
