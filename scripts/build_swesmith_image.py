"""Build SWE-smith's image of one repository the way SWE-smith builds it, and `docker save` it.

SWE-smith (SWE-bench/SWE-smith at cf2e649, `swesmith/build_repo/create_images.py`) builds one
image per repository profile with swebench's Dockerfile templates (swebench 4,
`swebench/harness/dockerfiles/python.py`): a base image (Ubuntu 22.04, the harness's apt packages,
Miniconda, a `nonroot` user) extended with SWE-smith's own apt line, then an environment image
that runs a `setup_env.sh`: clone the repository's mirror into /testbed, create the `testbed`
environment at the profile's Python, run the profile's install commands (and `pip install
pytest`, `configs/install_repo.sh`), with /testbed as the working directory and the environment
activated in every shell. The image is tagged with the name SWE-smith's rows give
(`swebench/swesmith.x86_64.<owner>_1776_<repo>.<commit8>`).

This script writes those two Dockerfiles and that script (its own text, from those facts) and
builds them with a docker daemon, changing only what cannot be reached from here, each named in
the image's labels:
- no registry: the base is FROM sweflow's Debian bookworm rootfs (`docker import`), not
  ubuntu:22.04 (the same apt packages install on it);
- no repo.anaconda.com: the environment is a venv of the profile's Python copied from this
  machine (pyenv), on PATH, instead of a conda env (the image's own settings make it active);
- no github.com: the mirror is cloned from the repository archive given (`--repo`);
- pip reaches PyPI through this machine's CA bundle (a proxy here re-signs TLS), during the
  build only.

Usage (a daemon at DOCKER_HOST, else sweflow starts a private one for the build):
    .venv/bin/python scripts/build_swesmith_image.py --out IMAGES_DIR
then `sweflow env validate DATA --images IMAGES_DIR` runs the profile's rows on it.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

import docker

from sweflow.envcache.pypi_cutoff import host_ca_file
from sweflow.envcache.runtimes import find_runtime
from sweflow.formats.swesmith import INSTALL_PYTEST, profiles
from sweflow.paths import cache_root, rootfs_cache
from sweflow.sandbox.docker import ensure_image
from sweflow.sandbox.docker.daemon import docker_daemon
from sweflow.sandbox.rootfs import debootstrap_rootfs

HERE = Path(__file__).resolve().parents[1]
MONKEYTYPE = HERE / "sweflow/data/formats/swe-smith/monkeytype/repos/Instagram__MonkeyType.git.tar"
# swebench 4's _DOCKERFILE_BASE_PY apt packages, then SWE-smith's _DOCKERFILE_BASE_EXTENDED ones
HARNESS_APT = (
    "wget git build-essential libffi-dev libtiff-dev python3 python3-pip python-is-python3 jq "
    "curl locales locales-all tzdata"
)
SWESMITH_APT = "ffmpeg libsm6 libxext6 libgl1"
ENV_DIR = "/opt/testbed"  # the venv standing for the harness's conda env "testbed"


def image_name(profile_key: str) -> str:
    """SWE-smith's image name of a profile (`swesmith/<owner>__<repo>.<commit8>`)."""
    mirror = profile_key.split("/", 1)[1]
    return f"swebench/swesmith.x86_64.{mirror.replace('__', '_1776_')}".lower()


def base_dockerfile(debian: str) -> str:
    return f"""FROM {debian}
ARG DEBIAN_FRONTEND=noninteractive
ENV TZ=Etc/UTC
RUN apt-get update && apt-get install -y {HARNESS_APT} && rm -rf /var/lib/apt/lists/*
RUN apt-get update && apt-get install -y {SWESMITH_APT} && rm -rf /var/lib/apt/lists/*
RUN adduser --disabled-password --gecos 'dog' nonroot
LABEL org.sweflow.stands-for="ubuntu:22.04 and Miniconda (swebench 4 _DOCKERFILE_BASE_PY)"
"""


def env_dockerfile(base: str, python: str, python_dir: str) -> str:
    return f"""FROM {base}
COPY python {python_dir}
COPY repo.git /tmp/repo.git
COPY setup_env.sh host-ca.pem /root/
RUN sed -i -e 's/\\r$//' /root/setup_env.sh && chmod +x /root/setup_env.sh
RUN PIP_CERT=/root/host-ca.pem /bin/bash /root/setup_env.sh \\
    && rm -rf /tmp/repo.git /root/host-ca.pem
WORKDIR /testbed/
ENV PATH={ENV_DIR}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
RUN echo "source {ENV_DIR}/bin/activate" > /root/.bashrc
LABEL org.sweflow.environment="a venv of Python {python} at {ENV_DIR}, for conda env testbed"
"""


def setup_script(profile: dict, python: str, python_dir: str) -> str:
    """SWE-smith's get_repo_setup_script, the conda steps as a venv (see the module)."""
    return (
        "\n".join(
            [
                "#!/bin/bash",
                "set -euxo pipefail",
                "git clone -o origin /tmp/repo.git /testbed",
                "cd /testbed",
                f"git fetch -q origin {profile['commit']}",  # the mirror's one commit, on main
                f"git checkout -q -B main {profile['commit']}",
                f"{python_dir}/bin/python{python} -m venv {ENV_DIR}",
                f"source {ENV_DIR}/bin/activate",
                *profile["install"],
                INSTALL_PYTEST,
            ]
        )
        + "\n"
    )


def debian_image(client: docker.DockerClient) -> str:
    """sweflow's bookworm rootfs as a docker image (made once, as the docker backend makes its
    images of layers)."""
    return ensure_image(client, [debootstrap_rootfs("bookworm", rootfs_cache())])


def build(client: docker.DockerClient, context: Path, tag: str) -> None:
    """One image from ``context``, its build output printed; networked (apt, PyPI)."""
    for chunk in client.api.build(
        path=str(context), tag=tag, network_mode="host", rm=True, forcerm=True, decode=True
    ):
        if "stream" in chunk:
            print(chunk["stream"], end="", flush=True)
        if "error" in chunk:
            raise SystemExit(f"building {tag}: {chunk['error']}")


def unpack_repo(archive: Path, dest: Path) -> None:
    """A bare repository from a bare repository's tar (as the fixtures commit them) or a
    bundle."""
    if archive.name.endswith(".bundle"):
        subprocess.run(["git", "clone", "-q", "--bare", str(archive), str(dest)], check=True)
        return
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="swesmith/Instagram__MonkeyType.70c3acf6")
    parser.add_argument("--repo", type=Path, default=MONKEYTYPE, help="the mirror (.git.tar)")
    parser.add_argument("--out", type=Path, required=True, help="folder for the saved image")
    args = parser.parse_args()
    profile = profiles()[args.profile]
    runtime = find_runtime(profile["python"], None)
    tag = image_name(args.profile)
    args.out.mkdir(parents=True, exist_ok=True)
    with contextlib.ExitStack() as stack:
        host = stack.enter_context(docker_daemon(cache_root() / "docker"))  # the tests' one
        client = docker.DockerClient(base_url=host, timeout=3600)
        debian = debian_image(client)
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        (work / "base").mkdir()
        (work / "base" / "Dockerfile").write_text(base_dockerfile(debian))
        build(client, work / "base", "swesmith.x86_64")
        env = work / "env"
        env.mkdir()
        if runtime.host_prefix is None:
            raise SystemExit(f"Python {profile['python']}: no host interpreter to copy")
        # at its own path, which its build linked it against (libpython's rpath)
        python_dir = str(runtime.host_prefix)
        (env / "Dockerfile").write_text(
            env_dockerfile("swesmith.x86_64", profile["python"], python_dir)
        )
        (env / "setup_env.sh").write_text(setup_script(profile, profile["python"], python_dir))
        shutil.copytree(runtime.host_prefix, env / "python", symlinks=True)
        # pip's CA as on this machine (a proxy that re-signs TLS), for the build only
        shutil.copy(host_ca_file() or "/etc/ssl/certs/ca-certificates.crt", env / "host-ca.pem")
        unpack_repo(args.repo, env / "repo.git")
        build(client, env, tag)
        out = args.out / (tag.replace("/", "_") + ".tar")
        with open(out, "wb") as f:
            for chunk in client.images.get(tag).save(named=True):
                f.write(chunk)
        print(f"{tag}: saved to {out} ({out.stat().st_size / 1e6:.0f} MB)")
        client.close()


if __name__ == "__main__":
    main()
