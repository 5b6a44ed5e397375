"""The generation loop: baseline autoregressive and speculative decoding, batched.

Every piece of work sits inside one phase range of docs/design.md#phases, so a trace of this
loop attributes its whole run to phases:

* ``schedule``: admission of queued requests into free cache slots, batch formation;
* ``prefill`` / ``draft_prefill``: the target / draft model on a new prompt;
* ``decode``: one iteration of the batch, containing ``forward`` (baseline) or ``draft`` +
  ``verify`` (speculative), then ``sample``, ``sync``, ``kv``;
* ``sync``: explicit device synchronization and the device-to-host token copies;
* ``kv``: cache slot reset, rollback after rejections, slot release.

A ``request`` start/end range spans admission to the last output token; ``proposed`` /
``accepted`` marks are emitted per sequence per speculative step, ``target_bytes`` per
target forward and ``input_tokens`` (the prompt tokens read) per prefill and draft prefill.
Token counts are marked too (``specnsys.annotate.VALUE_MARKS``): ``tokens`` per step (whole
batch) and per prefill, ``first_token`` (payload: request id) when a request's first token
reaches the host, ``output_tokens`` just before its range ends -- so per-token
time, TTFT and TPOT come from the trace itself. On CUDA, ``device_memory_peak`` marks inside
``prefill``/``forward``/``draft``/``verify`` give each range's peak allocated memory.

Cache invariant (per slot): the target cache holds every context token but the last one
(``cur``), so ``len(context) == target_len + 1``; at the start of each speculative step the
draft cache holds one token less (``draft_len == target_len - 1``) and its first forward
re-feeds ``[context[-2], cur]``. That makes draft rollback uniform across the batch: after a
full acceptance the draft never saw the last draft token, after a rejection it saw too many,
and in both cases setting ``draft_len = new_target_len - 1`` is right.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from instrument.model import KVCache, Transformer, bytes_per_forward
from instrument.sampling import (
    SamplingParams,
    greedy_accept,
    sample,
    select,
    speculative_accept,
    warp,
)
from specnsys import annotate

MODES = ("baseline", "spec")


@dataclass(frozen=True)
class Request:
    """One generation request: a token prompt and an exact output length (no EOS)."""

    request_id: int
    prompt: tuple[int, ...]
    max_new_tokens: int


@dataclass
class RequestResult:
    """Output tokens and host timestamps (``perf_counter_ns``) of one request."""

    request_id: int
    prompt_len: int
    output: list[int]
    t_admit_ns: int
    t_first_ns: int = 0
    t_end_ns: int = 0


@dataclass
class RunResult:
    """Everything a run produced; ``accepted`` holds one entry per sequence per spec step."""

    mode: str
    k: int
    concurrency: int
    results: list[RequestResult]
    wall_ns: int
    accepted: list[int] = field(default_factory=list)
    target_forwards: int = 0
    draft_forwards: int = 0
    target_bytes: int = 0


@dataclass
class _Slot:
    request: Request
    handle: annotate.RequestHandle
    result: RequestResult
    context: list[int]

    @property
    def remaining(self) -> int:
        return self.request.max_new_tokens - len(self.result.output)


class Generator:
    """Runs a list of requests through a target model (and a draft model in spec mode).

    Up to ``concurrency`` sequences decode together, one per KV-cache slot; a queued request
    is admitted as soon as a slot frees (closed-loop clients, so a request "arrives" when it is
    admitted and TTFT is measured from there).
    """

    def __init__(
        self,
        target: Transformer,
        draft: Transformer | None = None,
        *,
        mode: str = "baseline",
        k: int = 4,
        concurrency: int = 1,
        params: SamplingParams | None = None,
        seed: int = 0,
        sample_delay_s: float = 0.0,
    ) -> None:
        """``sample_delay_s`` adds a sleep to every decode step's ``sample`` phase: a known
        regression to inject (``specnsys check`` must name ``sample``)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}")
        if mode == "spec":
            if draft is None:
                raise ValueError("spec mode needs a draft model")
            if draft.config.vocab_size != target.config.vocab_size:
                raise ValueError("draft and target must share the vocabulary")
            if k < 1:
                raise ValueError("k must be >= 1")
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.target = target
        self.draft = draft if mode == "spec" else None
        self.mode = mode
        self.k = k if mode == "spec" else 0
        self.concurrency = concurrency
        self.params = params or SamplingParams()
        if sample_delay_s < 0:
            raise ValueError("sample_delay_s must be >= 0")
        self.sample_delay_s = sample_delay_s
        self.device = next(target.parameters()).device
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.tcache = KVCache(target.config, concurrency, self.device)
        self.dcache = (
            KVCache(self.draft.config, concurrency, self.device) if self.draft is not None else None
        )
        vocab = target.config.vocab_size
        self.presence = (
            torch.zeros(concurrency, vocab, dtype=torch.bool, device=self.device)
            if self.params.uses_presence
            else None
        )
        self._stats = RunResult(mode, self.k, concurrency, [], 0)

    # ------------------------------------------------------------------ helpers

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    @contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        """A phase range that, on CUDA with annotations on, also marks its peak memory.

        The allocator's peak is reset when the range opens and read (host-side counters, no
        device sync) just before it closes, inside it, so the mark belongs to this range.
        """
        track = self.device.type == "cuda" and annotate.enabled()
        with annotate.phase(name):
            if track:
                torch.cuda.reset_peak_memory_stats(self.device)
            yield
            if track:
                annotate.mark_value(
                    "device_memory_peak", torch.cuda.max_memory_allocated(self.device)
                )

    def _mark_target(self, kv_lens: list[int], tokens: int) -> None:
        n = bytes_per_forward(self.target.config, kv_lens, tokens)
        self._stats.target_forwards += 1
        self._stats.target_bytes += n
        annotate.mark_value("target_bytes", n)

    def _presence(self, slots: list[int]) -> torch.Tensor | None:
        if self.presence is None:
            return None
        return self.presence[slots]

    def _note_tokens(self, slot: int, tokens: list[int]) -> None:
        if self.presence is not None and tokens:
            self.presence[slot, torch.tensor(tokens, device=self.device)] = True

    def _check_fits(self, req: Request) -> None:
        need = len(req.prompt) + req.max_new_tokens + self.k + 1
        for cfg in (self.target.config, self.draft.config if self.draft else None):
            if cfg is not None and need > cfg.max_seq:
                raise ValueError(
                    f"request {req.request_id} needs {need} positions, max_seq is {cfg.max_seq}"
                )
        if not req.prompt or req.max_new_tokens < 1:
            raise ValueError(f"request {req.request_id} needs a prompt and >= 1 new token")

    # ------------------------------------------------------------------ phases

    def _admit(self, slot: int, req: Request) -> _Slot:
        """Start the request range and run its prefill(s); yields the first output token."""
        handle = annotate.start_request(req.request_id)
        result = RequestResult(req.request_id, len(req.prompt), [], time.perf_counter_ns())
        state = _Slot(req, handle, result, list(req.prompt))
        with annotate.phase("kv"):
            self.tcache.set_length(slot, 0)
            if self.dcache is not None:
                self.dcache.set_length(slot, 0)
            if self.presence is not None:
                self.presence[slot] = False
                self._note_tokens(slot, list(req.prompt))
        prompt = torch.tensor([req.prompt], device=self.device)
        with self._phase("prefill"):
            self._mark_target([0], len(req.prompt))
            annotate.mark_value("input_tokens", len(req.prompt))
            logits = self.target(prompt, self.tcache, [slot], last_only=True)[:, -1]
        with annotate.phase("sample"):
            token = select(logits, self.params, self.gen, self._presence([slot]))
        with annotate.phase("sync"):
            self._sync()
            first = int(token.item())
        result.t_first_ns = time.perf_counter_ns()
        annotate.mark_first_token(req.request_id)
        annotate.mark_tokens(1)  # before _emit, which may end the request (and the window)
        self._emit(slot, state, [first])
        if self.draft is not None and self.dcache is not None and state.remaining > 0:
            # The draft sees all but the last prompt token (see the cache invariant above).
            with annotate.phase("draft_prefill"):
                if len(req.prompt) > 1:
                    annotate.mark_value("input_tokens", len(req.prompt) - 1)
                    self.draft(prompt[:, :-1], self.dcache, [slot], last_only=True)
                    self._stats.draft_forwards += 1
        return state

    def _emit(self, slot: int, state: _Slot, tokens: list[int]) -> None:
        """Append output tokens (cut at the request's length); may end the request."""
        tokens = tokens[: state.remaining]
        state.result.output.extend(tokens)
        state.context.extend(tokens)
        if state.remaining == 0:
            state.result.t_end_ns = time.perf_counter_ns()
            annotate.end_request(state.handle, output_tokens=len(state.result.output))
        elif self.presence is not None:
            with annotate.phase("sample"):
                self._note_tokens(slot, tokens)

    def _injected_delay(self) -> None:
        if self.sample_delay_s > 0:
            time.sleep(self.sample_delay_s)

    def _baseline_step(self, slots: list[int], states: list[_Slot]) -> None:
        with annotate.phase("schedule"):
            cur = torch.tensor([[s.context[-1]] for s in states], device=self.device)
            kv_lens = [self.tcache.lengths[i] for i in slots]
            batch_slots = None if len(slots) == self.concurrency else slots
        with self._phase("forward"):
            self._mark_target(kv_lens, 1)
            logits = self.target(cur, self.tcache, batch_slots)[:, -1]
        with annotate.phase("sample"):
            self._injected_delay()
            nxt = select(logits, self.params, self.gen, self._presence(slots))
        with annotate.phase("sync"):
            self._sync()
            tokens = nxt.tolist()
        # Marked before _emit ends requests: the last request's end closes the window.
        annotate.mark_tokens(len(states))
        for slot, state, tok in zip(slots, states, tokens, strict=True):
            self._emit(slot, state, [tok])

    def _spec_step(self, slots: list[int], states: list[_Slot]) -> None:
        assert self.draft is not None and self.dcache is not None
        k, params, gen = self.k, self.params, self.gen
        with annotate.phase("schedule"):
            last2 = torch.tensor([s.context[-2:] for s in states], device=self.device)
            kv_lens = [self.tcache.lengths[i] for i in slots]
            batch_slots = None if len(slots) == self.concurrency else slots
            rows = torch.arange(len(slots), device=self.device)
        with self._phase("draft"):
            presence = self._presence(slots)
            base_presence = presence
            x = last2
            drafts, qs = [], []
            for _ in range(k):
                logits = self.draft(x, self.dcache, batch_slots)[:, -1]
                if params.greedy:
                    d = select(logits, params, None, presence)
                else:
                    q = warp(logits, params, presence)
                    d = sample(q, gen)
                    qs.append(q)
                drafts.append(d)
                if presence is not None:
                    presence = presence.clone()
                    presence[rows, d] = True
                x = d[:, None]
            draft_tokens = torch.stack(drafts, dim=1)  # [b, k]
            self._stats.draft_forwards += k
        with self._phase("verify"):
            self._mark_target(kv_lens, k + 1)
            verify_in = torch.cat((last2[:, 1:], draft_tokens), dim=1)
            logits = self.target(verify_in, self.tcache, batch_slots)  # [b, k+1, V]
        with annotate.phase("sample"):
            self._injected_delay()
            pos_presence = None
            if base_presence is not None:
                onehot = torch.zeros(
                    (len(slots), k + 1, logits.shape[-1]), dtype=torch.int32, device=self.device
                )
                onehot[:, 1:].scatter_(-1, draft_tokens[..., None], 1)
                pos_presence = (onehot.cumsum(dim=1) > 0) | base_presence[:, None]
            if params.greedy:
                target_tokens = select(logits, params, None, pos_presence)
                accepted, nxt = greedy_accept(target_tokens, draft_tokens)
            else:
                p = warp(logits, params, pos_presence)
                accepted, nxt = speculative_accept(p, torch.stack(qs, dim=1), draft_tokens, gen)
        with annotate.phase("sync"):
            self._sync()
            acc_list = accepted.tolist()
            nxt_list = nxt.tolist()
            draft_list = draft_tokens.tolist()
        with annotate.phase("kv"):
            for slot, kv_len, n in zip(slots, kv_lens, acc_list, strict=True):
                new_len = kv_len + n + 1
                self.tcache.set_length(slot, new_len)
                self.dcache.set_length(slot, new_len - 1)
        # Tokens kept (cut at each request's length), marked before _emit ends requests.
        annotate.mark_tokens(
            sum(min(n + 1, s.remaining) for s, n in zip(states, acc_list, strict=True))
        )
        for slot, state, n, tok, dr in zip(
            slots, states, acc_list, nxt_list, draft_list, strict=True
        ):
            annotate.mark_acceptance(proposed=k, accepted=n)
            self._stats.accepted.append(n)
            self._emit(slot, state, dr[:n] + [tok])

    # ------------------------------------------------------------------ driver

    def run(self, requests: list[Request]) -> RunResult:
        """Generate every request; returns outputs (in request order) and counters."""
        for req in requests:
            self._check_fits(req)
        queue = list(reversed(requests))
        active: dict[int, _Slot] = {}
        finished: list[RequestResult] = []
        t0 = time.perf_counter_ns()
        while queue or active:
            with annotate.phase("schedule"):
                free = [s for s in range(self.concurrency) if s not in active]
                admitted = []
                while free and queue:
                    admitted.append((free.pop(0), queue.pop()))
            for slot, req in admitted:
                state = self._admit(slot, req)
                if state.remaining > 0:
                    active[slot] = state
                else:
                    finished.append(state.result)
            if not active:
                continue
            slots = sorted(active)
            states = [active[s] for s in slots]
            with annotate.phase("decode"):
                if self.mode == "spec":
                    self._spec_step(slots, states)
                else:
                    self._baseline_step(slots, states)
                done = [s for s in slots if active[s].remaining == 0]
                if done:
                    with annotate.phase("kv"):
                        for s in done:
                            finished.append(active.pop(s).result)
                            self.tcache.set_length(s, 0)
                            if self.dcache is not None:
                                self.dcache.set_length(s, 0)
        self._stats.wall_ns = time.perf_counter_ns() - t0
        order = {r.request_id: i for i, r in enumerate(requests)}
        self._stats.results = sorted(finished, key=lambda r: order[r.request_id])
        return self._stats


def generate(
    target: Transformer,
    requests: list[Request],
    *,
    draft: Transformer | None = None,
    mode: str = "baseline",
    k: int = 4,
    concurrency: int = 1,
    params: SamplingParams | None = None,
    seed: int = 0,
) -> RunResult:
    """One-call convenience around ``Generator`` (a fresh cache per call)."""
    gen = Generator(
        target, draft, mode=mode, k=k, concurrency=concurrency, params=params, seed=seed
    )
    with torch.inference_mode():
        return gen.run(requests)
