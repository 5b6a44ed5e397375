"""Token selection: logit warping, plain sampling and the speculative accept/resample step.

Exactness of speculative sampling depends on the draft distribution ``q`` being exactly the
one the draft token was drawn from and ``p`` being exactly the target distribution plain
sampling would use, so both paths go through the same ``warp`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """``greedy`` takes the argmax of the (repetition-penalized) logits; otherwise sample
    from softmax(logits / temperature) restricted to the top-p nucleus."""

    greedy: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError("temperature must be > 0 (use greedy=True for argmax)")
        if not 0 < self.top_p <= 1:
            raise ValueError("top_p must be in (0, 1]")
        if self.repetition_penalty <= 0:
            raise ValueError("repetition_penalty must be > 0")

    @property
    def uses_presence(self) -> bool:
        return self.repetition_penalty != 1.0


def apply_repetition_penalty(
    logits: torch.Tensor, presence: torch.Tensor | None, penalty: float
) -> torch.Tensor:
    """CTRL-style penalty: logits of tokens already in the sequence are divided by
    ``penalty`` when positive and multiplied by it when negative. ``presence`` is a boolean
    mask broadcastable to ``logits``."""
    if presence is None or penalty == 1.0:
        return logits
    penalized = torch.where(logits > 0, logits / penalty, logits * penalty)
    return torch.where(presence, penalized, logits)


def warp(
    logits: torch.Tensor, params: SamplingParams, presence: torch.Tensor | None = None
) -> torch.Tensor:
    """Probabilities ``[..., vocab]`` that token selection draws from.

    Greedy returns the one-hot of the argmax, which turns speculative verification into
    exact-match checking through the same code path as sampling (rejection sampling with
    one-hot p and q). Computed in float32 at least, whatever the model dtype.
    """
    logits = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    logits = apply_repetition_penalty(logits, presence, params.repetition_penalty)
    if params.greedy:
        idx = logits.argmax(dim=-1, keepdim=True)
        return torch.zeros_like(logits).scatter_(-1, idx, 1.0)
    probs = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        # Keep a token if the mass before it is below top_p (so the top token always stays).
        keep_sorted = (sorted_p.cumsum(-1) - sorted_p) < params.top_p
        keep = torch.zeros_like(keep_sorted).scatter_(-1, order, keep_sorted)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of ``probs [n, vocab]`` (greedy one-hots yield their argmax)."""
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def select(
    logits: torch.Tensor,
    params: SamplingParams,
    generator: torch.Generator | None,
    presence: torch.Tensor | None = None,
) -> torch.Tensor:
    """Next token per row of ``logits [n, vocab]``; greedy skips the random draw."""
    if params.greedy:
        logits = apply_repetition_penalty(logits, presence, params.repetition_penalty)
        return logits.argmax(dim=-1)
    return sample(warp(logits, params, presence), generator)


def speculative_accept(
    p: torch.Tensor,
    q: torch.Tensor,
    drafts: torch.Tensor,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact speculative sampling (Leviathan et al. 2023, Chen et al. 2023), batched.

    ``p [b, k+1, V]``: target distributions at the k draft positions plus the bonus position;
    ``q [b, k, V]``: the draft distributions the ``drafts [b, k]`` were sampled from.
    Draft i is accepted with probability min(1, p_i(d_i) / q_i(d_i)); at the first rejection
    the next token is drawn from the residual max(0, p_i - q_i) renormalized; if all k are
    accepted it is drawn from p_k (the bonus). Padding q with a zero row at position k makes
    the bonus the residual of that row, so one draw serves both cases.

    Returns ``(accepted [b], next_token [b])`` with accepted in 0..k.
    """
    b, k = drafts.shape
    p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)
    q_d = q.gather(-1, drafts[..., None]).squeeze(-1)
    u = torch.rand((b, k), generator=generator, device=p.device, dtype=p.dtype)
    accept = u * q_d <= p_d  # u < p/q without dividing by a zero q
    accepted = accept.to(torch.int64).cumprod(dim=-1).sum(dim=-1)
    q_pad = torch.cat((q, torch.zeros_like(q[:, :1])), dim=1)
    rows = torch.arange(b, device=p.device)
    p_n, q_n = p[rows, accepted], q_pad[rows, accepted]
    residual = (p_n - q_n).clamp_min(0)
    mass = residual.sum(-1, keepdim=True)
    # Rounding can leave no mass where p and q are equal up to float error; fall back to p.
    residual = torch.where(mass > 0, residual / mass.clamp_min(1e-30), p_n)
    return accepted, sample(residual, generator)


def greedy_accept(
    target_tokens: torch.Tensor, drafts: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy verification: accept drafts while they equal the target's argmax.

    ``target_tokens [b, k+1]`` are the target argmaxes at each verify position. Returns
    ``(accepted [b], next_token [b])``: the correction token at the first mismatch, or the
    bonus token when all k match.
    """
    k = drafts.shape[1]
    match = (drafts == target_tokens[:, :k]).to(torch.int64)
    accepted = match.cumprod(dim=-1).sum(dim=-1)
    return accepted, target_tokens.gather(1, accepted[:, None]).squeeze(1)
