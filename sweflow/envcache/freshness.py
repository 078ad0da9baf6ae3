"""Whether a stored instance is still what its row and spec would build.

A manifest records the inputs of its build (:func:`build_record`, in its ``meta``); before an
instance is reused, the record its row and spec give now is compared with it (:func:`stale`).
An instance that differs is built again rather than refused: a build makes the store match
the dataset and specs it is given (an edited spec is how an environment gets fixed), and the
old layers stay while sandboxes use them (their leases), until gc takes them.
"""

from __future__ import annotations

import hashlib

from sweflow.envcache.records import Manifest
from sweflow.harness import internet
from sweflow.harness.specs import EnvSpec
from sweflow.instances import Instance

DIGESTS = ("spec_digest", "build_digest", "internet")  # shortened in messages
# Recorded since the emulated internet's trust hook: a manifest without it was built before
# (its test sandboxes refuse what old requests' bundled CA file checks), so it is stale by it.
REQUIRED = ("internet",)
# A manifest without an image was built from a spec: a row moved between its image and its
# recipe (``--images`` given or not) is built again, not taken for the other.
ABSENT_AS = {"image": ""}


def build_record(
    instance: Instance, spec: EnvSpec | None, recipe: str | None = None
) -> dict[str, str | None]:
    """What a manifest records of its build's inputs: the row's repository, version and commit,
    the spec's digests (``spec``: None for a row that runs on its own image), the version of
    the builder's recipe (what it does with a spec: bumped when that changes its layers) and
    what its emulated internet holds, if it has one (sweflow.harness.internet.contents)."""
    record: dict[str, str | None] = {
        "repo": instance.repo,
        "version": instance.version,
        "base_commit": instance.base_commit,
    }
    if instance.setup_patch:
        record["setup_patch"] = hashlib.sha256(instance.setup_patch.encode()).hexdigest()
    if spec is None:
        record["image"] = instance.image
    else:
        record["image"] = ""
        record["spec_digest"] = spec.env_digest()
        record["build_digest"] = spec.build_digest()
        record["recipe"] = recipe
        if spec.emulated_hosts:
            record["internet"] = internet.contents(spec.emulated_hosts)
    return record


def stale(manifest: Manifest, record: dict[str, str | None]) -> str | None:
    """Why the stored instance is not what ``record`` would build (None: it is). Only what the
    manifest recorded is compared: one written before a field was recorded is not stale by it,
    except by the ``REQUIRED`` fields."""
    changed = []
    for key, now in record.items():
        then = manifest.meta.get(key, "none" if key in REQUIRED else ABSENT_AS.get(key))
        if then is not None and then != now:
            if key in DIGESTS:
                then, now = then[:12], (now or "")[:12]
            changed.append(f"{key} {then} -> {now}")
    if not changed:
        return None
    return f"built from other inputs than its row and spec give now ({', '.join(changed)})"
