"""Qwen3 (dense) in torchtune 0.6.1, which has no Qwen3 builder: built from torchtune's own parts.

Qwen3 is Qwen2 without the q/k/v biases (unless ``attention_bias``), with a ``head_dim`` of its
own (not ``hidden_size / num_attention_heads``: Qwen3-0.6B has 16 heads of 128 in 1024) and an
RMSNorm over each head of q and k, applied before RoPE (transformers' ``Qwen3Attention``:
``q_norm(q_proj(x).view(..., head_dim))`` then ``apply_rotary_pos_emb``). torchtune's
``MultiHeadAttention`` takes a ``q_norm``/``k_norm`` but applies it after its positional
embedding, and a per-dimension scale does not commute with the rotation, so the norm goes into
the projection instead (:class:`HeadNormedLinear`): the attention sees q and k normed per head,
then rotates them, as transformers does. RoPE is torchtune's Qwen2 rotary embedding, which
rotates halves like transformers, so the weights load without the q/k permutation Llama needs.

The checkpoint keys are Qwen2's plus the two norms (:data:`NORM_KEYS`); :class:`Qwen3Checkpointer`
is torchtune's HF checkpointer with them added to its Qwen2 key table while it converts.
This module imports torchtune: it runs inside ``tune run`` and in tests, not in the CLI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torchtune.models.qwen2 import _convert_weights as qwen2_keys
from torchtune.models.qwen2._positional_embeddings import Qwen2RotaryPositionalEmbeddings
from torchtune.modules import (
    FeedForward,
    MultiHeadAttention,
    RMSNorm,
    TiedLinear,
    TransformerDecoder,
    TransformerSelfAttentionLayer,
)
from torchtune.modules.peft import LoRALinear
from torchtune.training import FullModelHFCheckpointer

# HF key -> torchtune key of the per-head norms (the rest are Qwen2's)
NORM_KEYS = {
    "model.layers.{}.self_attn.q_norm.weight": "layers.{}.attn.q_proj.norm.scale",
    "model.layers.{}.self_attn.k_norm.weight": "layers.{}.attn.k_proj.norm.scale",
}


class _HeadNorm:
    """After the projection, an RMSNorm over each head's ``head_dim`` values (Qwen3's q/k norm)."""

    head_dim: int
    norm: RMSNorm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        projected = super().forward(x)  # type: ignore[misc]
        heads = projected.unflatten(-1, (-1, self.head_dim))
        return self.norm(heads).flatten(-2)


class HeadNormedLinear(_HeadNorm, nn.Linear):
    def __init__(self, in_dim: int, out_dim: int, head_dim: int, eps: float, bias: bool) -> None:
        super().__init__(in_dim, out_dim, bias=bias)
        self.head_dim, self.norm = head_dim, RMSNorm(head_dim, eps=eps)


class HeadNormedLoRALinear(_HeadNorm, LoRALinear):
    def __init__(
        self, in_dim: int, out_dim: int, head_dim: int, eps: float, bias: bool, **lora: Any
    ) -> None:
        super().__init__(in_dim, out_dim, use_bias=bias, **lora)
        self.head_dim, self.norm = head_dim, RMSNorm(head_dim, eps=eps)


def _linear(in_dim: int, out_dim: int, bias: bool, lora: dict[str, Any] | None) -> nn.Module:
    if lora is None:
        return nn.Linear(in_dim, out_dim, bias=bias)
    return LoRALinear(in_dim, out_dim, use_bias=bias, **lora)


def _normed(
    in_dim: int, out_dim: int, head_dim: int, eps: float, bias: bool, lora: dict[str, Any] | None
) -> nn.Module:
    if lora is None:
        return HeadNormedLinear(in_dim, out_dim, head_dim, eps, bias)
    return HeadNormedLoRALinear(in_dim, out_dim, head_dim, eps, bias, **lora)


def qwen3(
    vocab_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    embed_dim: int,
    intermediate_dim: int,
    max_seq_len: int,
    head_dim: int,
    norm_eps: float = 1e-6,
    rope_base: float = 1_000_000.0,
    tie_word_embeddings: bool = False,
    attention_bias: bool = False,
    lora_attn_modules: list[str] | None = None,
    apply_lora_to_mlp: bool = False,
    apply_lora_to_output: bool = False,
    lora_rank: int = 8,
    lora_alpha: float = 16.0,
    lora_dropout: float = 0.0,
) -> TransformerDecoder:
    """A Qwen3 decoder; LoRA on ``lora_attn_modules`` (and the MLP) when they are given."""
    if apply_lora_to_output:
        raise ValueError("qwen3: LoRA on the output projection is not built here")
    lora = {"rank": lora_rank, "alpha": lora_alpha, "dropout": lora_dropout}
    attn_lora = set(lora_attn_modules or ())

    def on(name: str) -> dict[str, Any] | None:
        return lora if name in attn_lora else None

    mlp_lora = lora if apply_lora_to_mlp else None
    rope = Qwen2RotaryPositionalEmbeddings(dim=head_dim, max_seq_len=max_seq_len, base=rope_base)
    q_dim, kv_dim = num_heads * head_dim, num_kv_heads * head_dim
    layers = nn.ModuleList()
    for _ in range(num_layers):
        attn = MultiHeadAttention(
            embed_dim=embed_dim,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            q_proj=_normed(embed_dim, q_dim, head_dim, norm_eps, attention_bias, on("q_proj")),
            k_proj=_normed(embed_dim, kv_dim, head_dim, norm_eps, attention_bias, on("k_proj")),
            v_proj=_linear(embed_dim, kv_dim, attention_bias, on("v_proj")),
            output_proj=_linear(q_dim, embed_dim, False, on("output_proj")),
            pos_embeddings=rope,
            max_seq_len=max_seq_len,
        )
        mlp = FeedForward(
            gate_proj=_linear(embed_dim, intermediate_dim, False, mlp_lora),
            down_proj=_linear(intermediate_dim, embed_dim, False, mlp_lora),
            up_proj=_linear(embed_dim, intermediate_dim, False, mlp_lora),
        )
        layers.append(
            TransformerSelfAttentionLayer(
                attn=attn,
                mlp=mlp,
                sa_norm=RMSNorm(embed_dim, eps=norm_eps),
                mlp_norm=RMSNorm(embed_dim, eps=norm_eps),
            )
        )
    embeddings = nn.Embedding(vocab_size, embed_dim)
    output = (
        TiedLinear(embeddings)
        if tie_word_embeddings
        else nn.Linear(embed_dim, vocab_size, bias=False)
    )
    return TransformerDecoder(
        tok_embeddings=embeddings,
        layers=layers,
        max_seq_len=max_seq_len,
        num_heads=num_heads,
        head_dim=head_dim,
        norm=RMSNorm(embed_dim, eps=norm_eps),
        output=output,
    )


@contextlib.contextmanager
def _qwen3_keys() -> Iterator[None]:
    """torchtune's Qwen2 key table with Qwen3's norms, for as long as a conversion runs."""
    table = qwen2_keys._FROM_HF
    added = {k: v for k, v in NORM_KEYS.items() if k not in table}
    table.update(added)
    try:
        yield
    finally:
        for key in added:
            table.pop(key, None)


class Qwen3Checkpointer(FullModelHFCheckpointer):
    """torchtune's HF checkpointer for a Qwen3 folder: Qwen2's conversion (no q/k permutation,
    tied embeddings, optional biases) with the q/k norms' keys."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "model_type": "QWEN2"})

    def load_checkpoint(self) -> dict[str, Any]:
        with _qwen3_keys():
            return super().load_checkpoint()

    def save_checkpoint(self, *args: Any, **kwargs: Any) -> None:
        with _qwen3_keys():
            super().save_checkpoint(*args, **kwargs)
