"""A compact decoder-only transformer with a position-indexed KV cache.

Shape follows gpt-fast's ``model.py`` (RMSNorm, rotary positions, SwiGLU MLP, static KV
cache indexed by absolute position) because that design makes speculative rollback a pure
length change: stale cache entries past a sequence's length are masked out by the causal
mask and overwritten by the next forward. Weights come from a fixed seed (no checkpoint, no
hub download) and are generated on the CPU in float32 before moving to the target device, so
CPU and CUDA runs start from bit-identical parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class ModelConfig:
    """Model shape plus the knobs that make random weights behave like a usable LM.

    ``logit_scale`` sets the standard deviation of the output logits: default-scale random
    weights give near-uniform next-token distributions, for which greedy agreement between two
    models is meaningless; a scale of a few units gives peaked, LM-like distributions.
    """

    vocab_size: int = 128
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4
    max_seq: int = 320
    d_ff: int | None = None
    rope_base: float = 10000.0
    norm_eps: float = 1e-6
    logit_scale: float = 4.0
    dtype: str = "float32"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads:
            raise ValueError("d_model must be divisible by n_heads")
        if self.head_dim % 2:
            raise ValueError("head_dim must be even for rotary embeddings")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ff_dim(self) -> int:
        return self.d_ff if self.d_ff is not None else 4 * self.d_model

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def element_size(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()


PRESETS: dict[str, ModelConfig] = {
    # CPU tests and the default run: milliseconds per forward on one core.
    "tiny": ModelConfig(vocab_size=128, d_model=64, n_layers=2, n_heads=4, max_seq=320),
    # A heavier CPU/GPU run where the matmuls start to dominate framework overhead.
    "small": ModelConfig(vocab_size=1024, d_model=256, n_layers=4, n_heads=8, max_seq=1024),
    # ~1.26B parameters (TinyLlama-like shape) for memory-bound decode on a GPU.
    "1b": ModelConfig(
        vocab_size=32000,
        d_model=2048,
        n_layers=22,
        n_heads=32,
        d_ff=5632,
        max_seq=2048,
        logit_scale=6.0,
        dtype="bfloat16",
    ),
}


def preset(name: str, **overrides: object) -> ModelConfig:
    """A preset config, with field overrides (e.g. ``dtype="float64"`` for exact tests)."""
    try:
        base = PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}") from None
    return replace(base, **overrides) if overrides else base


def smaller_config(config: ModelConfig, seed: int | None = None) -> ModelConfig:
    """A draft-sized config sharing the target's vocabulary: half width, one layer."""
    heads = max(1, config.n_heads // 2)
    d_model = max(2 * heads * 2, config.d_model // 2)
    d_model -= d_model % (2 * heads)
    return replace(
        config,
        d_model=d_model,
        n_layers=1,
        n_heads=heads,
        d_ff=None if config.d_ff is None else config.d_ff // 2,
        seed=config.seed + 1 if seed is None else seed,
    )


def param_count(config: ModelConfig) -> int:
    """Parameters of ``Transformer(config)`` (embedding and head are not tied)."""
    d, f, v = config.d_model, config.ff_dim, config.vocab_size
    per_layer = 4 * d * d + 3 * d * f + 2 * d
    return 2 * v * d + config.n_layers * per_layer + d


def bytes_per_forward(config: ModelConfig, kv_len: int | Iterable[int], tokens: int = 1) -> int:
    """Bytes one forward reads/writes from memory: weights + KV cache, for bandwidth estimates.

    ``kv_len`` is the number of cached positions each sequence attends to (an int for one
    sequence, or one int per sequence of the batch); ``tokens`` the new tokens per sequence.
    Counts every weight once (decode is memory-bound: weights are streamed once per forward
    regardless of batch), only the embedding rows actually looked up, the K and V read for
    ``kv_len + tokens`` positions per layer, and the K and V written for the new tokens.
    """
    lens = [kv_len] if isinstance(kv_len, int) else list(kv_len)
    batch = len(lens)
    e = config.element_size
    d = config.d_model
    weights = (param_count(config) - config.vocab_size * d) * e
    embed_rows = batch * tokens * d * e
    kv_read = config.n_layers * 2 * sum(n + tokens for n in lens) * d * e
    kv_write = config.n_layers * 2 * batch * tokens * d * e
    return weights + embed_rows + kv_read + kv_write


class KVCache:
    """Per-layer K/V buffers ``[slots, heads, max_seq, head_dim]`` plus per-slot lengths.

    A slot holds one sequence. ``lengths`` lives on the host (as gpt-fast keeps ``input_pos``)
    because the scheduler needs it every step anyway; rollback after rejected drafts is just
    ``set_length``, and freeing a slot is ``set_length(slot, 0)``.
    """

    def __init__(self, config: ModelConfig, slots: int, device: torch.device | str) -> None:
        shape = (slots, config.n_heads, config.max_seq, config.head_dim)
        dtype = config.torch_dtype
        self.config = config
        self.slots = slots
        self.device = torch.device(device)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.n_layers)]
        self.lengths: list[int] = [0] * slots

    def set_length(self, slot: int, length: int) -> None:
        """Truncate (or, after a forward, confirm) the valid prefix of ``slot``."""
        if not 0 <= length <= self.config.max_seq:
            raise ValueError(f"length {length} outside 0..{self.config.max_seq}")
        self.lengths[slot] = length

    def bytes(self) -> int:
        return 2 * sum(t.numel() * t.element_size() for t in self.k)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding on the two halves of the head dimension, in the tables' precision."""
    x1, x2 = x.to(cos.dtype).chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


class Block(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d = config.d_model
        self.n_heads = config.n_heads
        self.head_dim = config.head_dim
        self.attn_norm = RMSNorm(d, config.norm_eps)
        self.wqkv = nn.Linear(d, 3 * d, bias=False)
        self.wo = nn.Linear(d, d, bias=False)
        self.mlp_norm = RMSNorm(d, config.norm_eps)
        self.w_gate = nn.Linear(d, config.ff_dim, bias=False)
        self.w_up = nn.Linear(d, config.ff_dim, bias=False)
        self.w_down = nn.Linear(config.ff_dim, d, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
        slot_index: torch.Tensor | None,
        positions: torch.Tensor,
        kv_len: int,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        qkv = self.wqkv(self.attn_norm(x)).view(b, t, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.unbind(2)  # [b, t, heads, head_dim]
        q = _rotate(q.transpose(1, 2), cos, sin)
        k = _rotate(k.transpose(1, 2), cos, sin)
        v = v.transpose(1, 2)
        rows = (
            torch.arange(b, device=x.device)[:, None] if slot_index is None else slot_index[:, None]
        )
        # Advanced indices on dims 0 and 2 put the broadcast [b, t] first: value is [b, t, h, d].
        k_cache[rows, :, positions] = k.transpose(1, 2)
        v_cache[rows, :, positions] = v.transpose(1, 2)
        if slot_index is None:
            keys, values = k_cache[:, :, :kv_len], v_cache[:, :, :kv_len]
        else:
            keys, values = k_cache[slot_index, :, :kv_len], v_cache[slot_index, :, :kv_len]
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)
        x = x + self.wo(attn.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Transformer(nn.Module):
    """Decoder-only LM whose ``forward`` appends to a ``KVCache`` for a set of slots."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        cos, sin = self.rope_tables()
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights()

    def rope_tables(self, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin tables ``[max_seq, head_dim / 2]``, at least float32 whatever the model dtype
        (bf16 angles lose the position resolution long contexts need)."""
        config = self.config
        half = config.head_dim // 2
        inv_freq = 1.0 / (config.rope_base ** (torch.arange(half, dtype=torch.float64) / half))
        angles = torch.arange(config.max_seq, dtype=torch.float64)[:, None] * inv_freq[None, :]
        table_dtype = torch.float64 if config.torch_dtype == torch.float64 else torch.float32
        return angles.cos().to(device, table_dtype), angles.sin().to(device, table_dtype)

    @torch.no_grad()
    def _init_weights(self) -> None:
        """Seeded init on the CPU so every device starts from the same numbers."""
        gen = torch.Generator().manual_seed(self.config.seed)
        for name, p in self.named_parameters():
            if p.dim() == 1:
                continue  # norm gains stay 1
            if name == "embed.weight":
                std = 1.0
            elif name == "head.weight":
                std = self.config.logit_scale / math.sqrt(p.shape[1])
            else:
                std = 1.0 / math.sqrt(p.shape[1])
            p.copy_(torch.randn(p.shape, generator=gen) * std)

    def forward(
        self,
        tokens: torch.Tensor,
        cache: KVCache,
        slots: Sequence[int] | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits for ``tokens [b, t]`` written at each slot's current length; lengths += t.

        ``slots`` lists the cache rows of the batch rows (``None``: all rows in order, which
        avoids gathering the cache). ``last_only`` computes the head for the last position
        only (prefill needs nothing else). Returns ``[b, t or 1, vocab]``.
        """
        b, t = tokens.shape
        slot_list = list(range(cache.slots)) if slots is None else list(slots)
        if len(slot_list) != b:
            raise ValueError(f"{b} token rows for {len(slot_list)} slots")
        starts = [cache.lengths[s] for s in slot_list]
        kv_len = max(starts) + t
        if kv_len > self.config.max_seq:
            raise ValueError(f"sequence would exceed max_seq={self.config.max_seq}")
        device = tokens.device
        full = slot_list == list(range(cache.slots))
        slot_index = None if full else torch.tensor(slot_list, device=device)
        positions = torch.tensor(starts, device=device)[:, None] + torch.arange(t, device=device)
        cos = self.rope_cos[positions][:, None]  # [b, 1, t, half], float32/64
        sin = self.rope_sin[positions][:, None]
        mask = (torch.arange(kv_len, device=device)[None, None, :] <= positions[:, :, None])[
            :, None
        ]  # [b, 1, t, kv_len]: causal, and hides stale entries past each slot's length
        x = self.embed(tokens)
        for block, k_cache, v_cache in zip(self.blocks, cache.k, cache.v, strict=True):
            x = block(x, cos, sin, mask, k_cache, v_cache, slot_index, positions, kv_len)
        if last_only:
            x = x[:, -1:]
        logits = self.head(self.norm(x))
        for s in slot_list:
            cache.lengths[s] += t
        return logits


def build_model(config: ModelConfig, device: torch.device | str = "cpu") -> Transformer:
    """Construct, initialize, cast and move a model; eval mode, no grad needed."""
    model = Transformer(config)
    model = model.to(device=device, dtype=config.torch_dtype).eval().requires_grad_(False)
    # .to(dtype) also cast the rotary tables; put the full-precision ones back.
    model.rope_cos, model.rope_sin = model.rope_tables(device)
    return model
