"""Request sets for the runner: fixed per seed, shaped like common serving workloads.

Prompts are random tokens (the models have random weights, so content carries no meaning);
what matters for a trace is the shape of the work -- prompt length drives prefill cost,
output length drives how long decode (the accelerable part) runs:

* ``chat``: short prompts, long outputs -- decode dominates, speculation helps most;
* ``rag``: long prompts, short outputs -- prefill dominates, speculation helps little;
* ``mixed``: each request drawn from one of the two with equal probability.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from instrument.loop import Request


@dataclass(frozen=True)
class Profile:
    """Inclusive ranges of prompt and output lengths, in tokens."""

    prompt: tuple[int, int]
    output: tuple[int, int]


PROFILES: dict[str, Profile | None] = {
    "chat": Profile(prompt=(8, 32), output=(48, 96)),
    "rag": Profile(prompt=(96, 192), output=(8, 24)),
    "mixed": None,  # per request: chat or rag
}
CONCURRENCY_LEVELS: tuple[int, ...] = (1, 4, 8)


def make_requests(
    profile: str,
    n: int,
    seed: int,
    vocab_size: int,
    max_seq: int,
    max_new_tokens: int | None = None,
    reserve: int = 0,
) -> list[Request]:
    """``n`` requests of ``profile``, identical for the same arguments.

    ``max_new_tokens`` caps every output length; ``reserve`` keeps that many positions free
    at the end of the context (a speculative step writes k+1 positions past the last token),
    and prompts are shortened if they would not fit in ``max_seq``.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {sorted(PROFILES)}")
    if n < 1:
        raise ValueError("need at least one request")
    rng = random.Random(f"{profile}:{seed}")
    requests = []
    for i in range(n):
        shape = PROFILES[profile] or PROFILES[rng.choice(("chat", "rag"))]
        assert shape is not None
        out = rng.randint(*shape.output)
        if max_new_tokens is not None:
            out = min(out, max_new_tokens)
        plen = rng.randint(*shape.prompt)
        plen = min(plen, max_seq - out - reserve - 1)
        if plen < 1:
            raise ValueError(f"max_seq={max_seq} too small for {out} output tokens")
        prompt = tuple(rng.randrange(vocab_size) for _ in range(plen))
        requests.append(Request(request_id=i, prompt=prompt, max_new_tokens=out))
    return requests
