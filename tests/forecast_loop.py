"""Built traces of a serving loop whose every cost is known, for the forecast tests.

The loop is the instrument's (instrument/loop.py), written out with exact durations: at the
top of each iteration a ``schedule`` (a fixed part plus one per admitted request); each
admitted request gets a ``request`` range, ``kv``, a ``prefill`` of ``P0 + P1 * L`` with an
``input_tokens`` mark, its first-token ``sample`` and ``sync``, and (speculative) a
``draft_prefill`` over ``L - 1`` tokens; then one ``decode`` step over the batch: ``schedule``,
``draft`` (``D0 + k * (DF + DB * batch)``) and ``verify`` (``V0 + V1 * (k + 1) * batch``) or
``forward`` (``F0 + F1 * batch``), ``sample`` (``S0 + S1 * positions``), ``sync`` (``Y0 + Y1 *
batch``), ``kv`` (``Q1 * batch``, speculative rollback), a gap that is the decode range's own
time, the tokens and acceptance marks, request ends (``output_tokens`` marks) and the ``kv``
release of each finished request. Accepted drafts per sequence-step come from a pattern (cut
at k, so that a draft position's acceptance does not depend on k, as in a real run).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from specnsys.testing import NsysExportBuilder


@dataclass(frozen=True)
class Costs:
    sch_top: int = 5_000
    sch_admit: int = 0
    sch_step: int = 20_000
    kv_admit: int = 3_000
    kv_done: int = 0
    kv_seq: int = 500
    p0: int = 100_000
    p1: int = 2_000
    dp0: int = 50_000
    dp1: int = 500
    s_first: int = 30_000
    y_first: int = 5_000
    f0: int = 800_000
    f1: int = 40_000
    v0: int = 900_000
    v1: int = 30_000
    d0: int = 20_000
    df: int = 100_000
    db: int = 10_000
    s0: int = 60_000
    s1: int = 2_000
    y0: int = 10_000
    y1: int = 1_000
    gap: int = 7_000
    prefill_knot: int | None = None
    """With a knot, a prompt token past it costs ``v1`` (one more verify position), not
    ``p1``: a prefill whose cost per token falls as the pass grows, as on a CPU."""

    def prefill(self, inp: int) -> int:
        if self.prefill_knot is None or inp <= self.prefill_knot:
            return self.p0 + self.p1 * inp
        return self.p0 + self.p1 * self.prefill_knot + self.v1 * (inp - self.prefill_knot)


COSTS = Costs()


def constant(a: int) -> Callable[[int], int]:
    return lambda _i: a


def iid(alpha: float, k: int, offset: float = 0.0) -> Callable[[int], int]:
    """Accepted drafts with the frequencies of Leviathan's i.i.d. model (each draft kept with
    *alpha* once the ones before it were: ``P(accepted >= i) = alpha^i``), in a low-discrepancy
    order (the golden-ratio sequence), so a short run already has those frequencies."""
    golden = (5**0.5 - 1) / 2

    def accepted(i: int) -> int:
        u = (offset + i * golden) % 1.0
        n = 0
        while n < k and u < alpha ** (n + 1):
            n += 1
        return n

    return accepted


@dataclass
class _Seq:
    rid: int
    remaining: int
    out: int
    start: int


def build_run(
    path: Path,
    requests: Sequence[tuple[int, int]],
    *,
    concurrency: int,
    k: int = 0,
    accepted: Callable[[int], int] | None = None,
    costs: Costs = COSTS,
    gpu: bool = False,
) -> Path:
    """A run of *requests* ``(input, output)`` lengths; speculative with *k* drafts; with
    *gpu*, each target and draft pass launches one kernel that runs inside its range."""
    c = costs
    accepted = accepted or constant(0)
    b = NsysExportBuilder()
    b.process(1, "python3")
    b.thread(1, 1, "main")
    b.domain(1, "specnsys", pid=1, tid=1)
    kw: dict[str, int] = {"pid": 1, "tid": 1, "domain_id": 1}
    queue = list(enumerate(requests))
    active: dict[int, _Seq] = {}
    t = 0
    seq_step = 0
    ends: list[tuple[int, int, int]] = []  # (start, end, rid)

    launches = 0
    if gpu:
        b.gpu(0)

    def rng(name: str, ns: int) -> None:
        nonlocal t, launches
        b.push_pop(t, t + ns, name, **kw)
        if gpu and name in ("forward", "verify", "draft"):
            launches += 1
            b.runtime(t + 1, t + 2, "cudaLaunchKernel", launches)
            b.kernel(t + 2, t + ns - 1, f"{name}_kernel", launches)
        t += ns

    def end(seq: _Seq) -> None:
        nonlocal t
        b.mark(t, "output_tokens", payload_int=seq.out, **kw)
        ends.append((seq.start, t, seq.rid))
        t += 1  # one instant per request end: a mark two requests could claim is neither's

    while queue or active:
        free = [s for s in range(concurrency) if s not in active]
        admitted = []
        while free and queue:
            admitted.append((free.pop(0), queue.pop(0)))
        rng("schedule", c.sch_top + c.sch_admit * len(admitted))
        for slot, (rid, (inp, out)) in admitted:
            seq = _Seq(rid, out - 1, out, t)
            rng("kv", c.kv_admit)
            b.push_pop(t, t + c.prefill(inp), "prefill", **kw)
            b.mark(t + 1, "input_tokens", payload_int=inp, **kw)
            t += c.prefill(inp)
            rng("sample", c.s_first)
            rng("sync", c.y_first)
            b.mark(t, "first_token", payload_int=rid, **kw)
            b.mark(t, "tokens", payload_int=1, **kw)
            if seq.remaining == 0:
                end(seq)
                continue
            if k:
                b.push_pop(t, t + c.dp0 + c.dp1 * (inp - 1), "draft_prefill", **kw)
                b.mark(t + 1, "input_tokens", payload_int=inp - 1, **kw)
                t += c.dp0 + c.dp1 * (inp - 1)
            active[slot] = seq
        if not active:
            continue
        slots = sorted(active)
        batch = len(slots)
        step_start = t
        rng("schedule", c.sch_step)
        if k:
            rng("draft", c.d0 + k * (c.df + c.db * batch))
            rng("verify", c.v0 + c.v1 * (k + 1) * batch)
            positions = (k + 1) * batch
        else:
            rng("forward", c.f0 + c.f1 * batch)
            positions = batch
        rng("sample", c.s0 + c.s1 * positions)
        rng("sync", c.y0 + c.y1 * batch)
        if k:
            rng("kv", c.kv_seq * batch)
        t += c.gap
        gains = {}
        for s in slots:
            a = min(accepted(seq_step), k) if k else 0
            seq_step += 1
            gains[s] = (a, min(a + 1, active[s].remaining))
        b.mark(t, "tokens", payload_int=sum(g for _, g in gains.values()), **kw)
        t += 1
        for s in slots:
            if k:
                b.mark(t, "proposed", payload_int=k, **kw)
                b.mark(t, "accepted", payload_int=gains[s][0], **kw)
            active[s].remaining -= gains[s][1]
        t += 1
        done = [s for s in slots if active[s].remaining == 0]
        for s in done:
            end(active.pop(s))
        if done:
            rng("kv", c.kv_done * len(done))
        b.push_pop(step_start, t, "decode", **kw)
    for start, stop, rid in ends:
        b.start_end(start, stop, "request", payload_int=rid, **kw)
    return b.write(path)


def lengths(n: int, inputs: tuple[int, int], outputs: tuple[int, int], seed: int = 0) -> list[
    tuple[int, int]
]:
    """*n* requests with input and output lengths drawn uniformly from the ranges."""
    r = random.Random(seed)
    return [(r.randint(*inputs), r.randint(*outputs)) for _ in range(n)]
