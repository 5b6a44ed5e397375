"""Draft models for speculative decoding, built without any checkpoint.

Two kinds, because random-weight models need a controllable relation to the target:

* ``smaller``: an independent model of a draft-sized config (cheap, cost ratio c << 1, but its
  random weights agree with the target's only by chance -- acceptance near 1/entropy);
* ``noised``: the target's own weights plus relative Gaussian noise. The noise level sets the
  acceptance rate (0 gives 100%), at the price of a draft as expensive as the target, so use
  it to study acceptance and the loop mechanics rather than the cost ratio.
"""

from __future__ import annotations

import copy

import torch

from instrument.model import ModelConfig, Transformer, build_model, smaller_config

DRAFT_KINDS = ("noised", "smaller")


@torch.no_grad()
def noised_copy(target: Transformer, noise: float, seed: int = 1234) -> Transformer:
    """A copy of ``target`` with every weight tensor perturbed: w + noise * std(w) * N(0, 1).

    Noise is drawn on the CPU from a seeded generator so the draft is the same on every device.
    1-D tensors (norm gains) are left as they are: they are all ones, with no scale to perturb.
    """
    if noise < 0:
        raise ValueError("noise must be >= 0")
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(seed)
    for p in draft.parameters():
        if p.dim() > 1 and noise > 0:
            scale = noise * p.float().std().item()
            p.add_((torch.randn(p.shape, generator=gen) * scale).to(p.device, p.dtype))
    return draft


def build_draft(
    kind: str,
    target: Transformer,
    noise: float = 0.3,
    seed: int = 1234,
) -> Transformer:
    """Build the draft model named ``kind`` (one of ``DRAFT_KINDS``) for ``target``."""
    device = next(target.parameters()).device
    if kind == "noised":
        return noised_copy(target, noise, seed)
    if kind == "smaller":
        config: ModelConfig = smaller_config(target.config, seed=seed)
        return build_model(config, device)
    raise ValueError(f"unknown draft kind {kind!r}; choose from {DRAFT_KINDS}")
