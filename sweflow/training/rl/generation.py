"""Where an episode's tokens come from, and what it cost: the policy's generators.

A generator is the ``Generate`` of sweflow.training.rl.episode (context ids in; generated ids
and their log-probabilities out) that also says which policy it samples (``version``: how many
updates that policy had had) and how long the model was busy (``busy_s``: the time during which
at least one generation was in flight, so the environment's share of a rollout is the rest of
its wall time however many episodes ran at once) and ``generated`` tokens.

:class:`LocalGenerator` samples with transformers' ``generate`` in the trainer's process, one
generation at a time; sweflow.training.rl.served.ServedPolicy asks a vLLM server, all of a
step's episodes at once.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from sweflow.sandbox.tracking import interrupted


class BusyClock:
    """The time during which at least one of any number of concurrent calls was in flight."""

    def __init__(self) -> None:
        self.busy_s = 0.0
        self._open = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def __enter__(self) -> BusyClock:
        with self._lock:
            if self._open == 0:
                self._since = time.perf_counter()
            self._open += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._open -= 1
            if self._open == 0:
                self.busy_s += time.perf_counter() - self._since


def _until_interrupted() -> Any:
    """A stopping criterion of ``generate`` checked after every token: Ctrl-C cancels the
    episodes, and the reply being generated in a worker thread ends at once with them (it would
    keep the process alive until its last token)."""
    import torch
    from transformers import StoppingCriteria

    class UntilInterrupted(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), interrupted(), dtype=torch.bool)

    return UntilInterrupted()


class LocalGenerator:
    """Sampling from the policy being trained, in this process (Hugging Face ``generate``).

    One generation at a time (the model is shared with the trainer); its version is the
    trainer's, set by whoever updates the model."""

    def __init__(self, model: Any, tokenizer: Any, temperature: float, version: int = 0) -> None:
        self.model, self.tokenizer, self.temperature = model, tokenizer, temperature
        self.version = version
        self.clock = BusyClock()
        self.generated = 0
        self._lock = threading.Lock()

    @property
    def busy_s(self) -> float:
        return self.clock.busy_s

    async def __call__(
        self, ids: list[int], max_new: int, temperature: float | None = None
    ) -> tuple[list[int], list[float]]:
        """Sampled at ``temperature`` (default: the generator's; 0: greedy)."""
        t = self.temperature if temperature is None else temperature
        return await asyncio.to_thread(self._generate, ids, max_new, t)

    def _generate(
        self, ids: list[int], max_new: int, temperature: float
    ) -> tuple[list[int], list[float]]:
        import torch

        sampling = {"do_sample": True, "temperature": temperature, "top_k": 0, "top_p": 1.0}
        with self._lock, self.clock:
            was_training = self.model.training
            self.model.eval()
            try:
                with torch.no_grad():
                    out = self.model.generate(
                        torch.tensor([ids], device=self.model.device),
                        max_new_tokens=max_new,
                        **(sampling if temperature > 0 else {"do_sample": False}),
                        eos_token_id=self.tokenizer.eos_token_id,
                        pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                        output_logits=True,
                        return_dict_in_generate=True,
                        stopping_criteria=[_until_interrupted()],
                    )
            finally:
                self.model.train(was_training)
            new = out.sequences[0, len(ids) :].tolist()
            logits = torch.stack(out.logits)[:, 0, :].float() / (temperature or 1.0)
            picked = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(new)[:, None])
            self.generated += len(new)
            return new, picked[:, 0].tolist()
