"""The shell a build sandbox runs, besides the spec's own commands: what every step runs with,
the lines that make an install give the same files each time, and the lines that keep the
install's own files out of the agent's diff. The builder (``builder``) puts them together."""

from __future__ import annotations

import os
import shlex

from sweflow.envcache.repos import FIXED_AUTHOR

# What `conda create python=X` gave the harness's environment images (2024: pip 24.0, setuptools
# 69.5, wheel 0.43), capped there: pip 25.3 dropped the `setup.py develop` fallback that older
# repositories' editable installs need, and setuptools 81+ drops pkg_resources. On an older
# Python, pip picks the newest release below the cap that supports it.
HARNESS_TOOLS = ("pip<24.1", "setuptools<70", "wheel<0.44")
# What every build step runs with. SOURCE_DATE_EPOCH makes pip (on Python 3.7 on) compile
# hash-checked .pyc files (PEP 552): their bytes depend on the source's content only, not on when
# it was installed, so the same package in two environments is the same files, stored once by
# the store's file pool, and a rebuild gives the same layer. Imports validate them by hashing
# the source instead of comparing its mtime: a changed source is recompiled as before.
BUILD_ENV = {
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_CACHE_DIR": "1",
    "SOURCE_DATE_EPOCH": "315532800",  # 1980-01-01, the earliest time a zip (wheel) can hold
}
# A shell command that prints the site-packages folder of the venv a step runs in.
VENV_SITE = "python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'"
# The install step's Python processes draw temporary names from a fixed seed, through a .pth
# file in the venv that the step removes when it ends. Cython writes the path of pip's build
# environment (/tmp/pip-build-env-<random>) into every module it generates, so an extension
# built for two commits of a repository differed in those bytes alone and was stored once per
# instance (200 MB of Verified's astropy instances). Seeded, the same source builds to the
# same files, which the file pool then stores once; what the files do is unchanged, so stored
# layers stay valid (RECIPE unchanged). Each sandbox has its own /tmp: equal names never meet.
SEEDED_TEMP_NAMES_AT = "/tmp/sweflow-seeded-temp-names.pth"
SEEDED_TEMP_NAMES = (
    "import os, random, tempfile; names = tempfile._get_candidate_names();"
    " names._rng, names._rng_pid = random.Random(0), os.getpid()\n"
)
SEED_TEMP_NAMES = (
    f'SEEDED="$({VENV_SITE})/{os.path.basename(SEEDED_TEMP_NAMES_AT)}"\n'
    "trap 'rm -f \"$SEEDED\"' EXIT\n"
    f'cp {SEEDED_TEMP_NAMES_AT} "$SEEDED"'
)
# Files the install step leaves untracked (an egg-info, a generated _version.py) are not the
# agent's work: listed in .git/info/exclude, they stay out of `git status` and of every diff.
EXCLUDE_INSTALL_FILES = (
    "mkdir -p .git/info && git ls-files -z --others --exclude-standard --directory"
    " | xargs -0 -r printf '/%s\\n' >> .git/info/exclude"
)

# Setup commands that edit tracked files (a sed on setup.py) are committed, as the harness
# commits them, so that a diff against HEAD shows only the agent's work.
COMMIT_SETUP_EDITS = (
    "git diff --quiet || git -c user.email=setup@swebench.config -c user.name=SWE-bench"
    " commit -qam 'SWE-bench setup'"
)


def see_venv_from_base(base_python: str) -> str:
    """A shell line that makes the base interpreter see the venv's packages (a .pth file).

    The harness's environment is a conda prefix: every path to its interpreter, a symlink
    included, finds its packages. A venv is found only through the pyvenv.cfg beside the path
    used, so a tool that links the interpreter elsewhere (tox --current-env, as Sphinx's tests
    run) would start a bare Python; with the .pth the base interpreter has the venv's packages
    too, while the venv itself still ignores the base's.
    """
    base_site = f"{base_python} -c 'import site; print(site.getsitepackages()[0])'"
    pth = '"$BASE_SITE/sweflow-venv.pth"'
    return f'BASE_SITE=$({base_site}) && mkdir -p "$BASE_SITE" && {VENV_SITE} > {pth}'


def setup_patch_script(workdir: str) -> str:
    """Commit /tmp/sweflow-setup.diff on the checkout at ``workdir`` with the image's own git,
    as ``repos.commit_patch`` commits a setup patch on a checkout sweflow exports (the same
    author; the date comes with the step's environment, ``repos.FIXED_DATE``)."""
    author = " ".join(map(shlex.quote, FIXED_AUTHOR))
    return "\n".join(
        [
            "set -euo pipefail",
            f"cd {shlex.quote(workdir)}",
            "git apply --whitespace=nowarn /tmp/sweflow-setup.diff",
            "git add -A",
            f"git {author} -c core.logAllRefUpdates=false commit -q --no-verify -m 'setup patch'",
        ]
    )
