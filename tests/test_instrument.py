"""Correctness of the instrument workload: lossless speculative decoding, exact speculative
sampling, and KV-cache rollback. CPU only, one torch thread, seconds in total."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from instrument import run as runner  # noqa: E402
from instrument.draft import build_draft, noised_copy  # noqa: E402
from instrument.loop import Generator, Request, generate  # noqa: E402
from instrument.model import (  # noqa: E402
    KVCache,
    build_model,
    bytes_per_forward,
    param_count,
    preset,
    smaller_config,
)
from instrument.sampling import (  # noqa: E402
    SamplingParams,
    greedy_accept,
    sample,
    speculative_accept,
    warp,
)
from instrument.stats import acceptance, summarize  # noqa: E402
from instrument.workloads import PROFILES, make_requests  # noqa: E402
from specnsys import annotate  # noqa: E402

torch.set_num_threads(1)

GREEDY = SamplingParams(greedy=True)
# chi2.ppf(1 - 1e-3, df=7): the false-alarm rate of each goodness-of-fit test below is 1e-3,
# and with fixed seeds every test is deterministic.
CHI2_CRIT_DF7_ALPHA_1E3 = 24.3219


@pytest.fixture(scope="module")
def target():
    # float64 so batched (verify) and incremental logits cannot flip a near-tie argmax.
    return build_model(preset("tiny", dtype="float64"))


@pytest.fixture(scope="module")
def requests():
    return make_requests(
        "mixed", 10, seed=3, vocab_size=128, max_seq=320, max_new_tokens=24, reserve=5
    )


def _outputs(result):
    return [r.output for r in result.results]


# --------------------------------------------------------------------------- lossless greedy


@pytest.mark.parametrize("k", [2, 4])
@pytest.mark.parametrize(
    ("draft_kind", "noise", "penalty"),
    [("noised", 0.2, 1.0), ("noised", 0.2, 1.3), ("smaller", 0.0, 1.0)],
)
def test_greedy_spec_equals_greedy_baseline(target, requests, k, draft_kind, noise, penalty):
    params = SamplingParams(greedy=True, repetition_penalty=penalty)
    base = generate(target, requests, mode="baseline", concurrency=4, params=params)
    draft = build_draft(draft_kind, target, noise)
    spec = generate(target, requests, draft=draft, mode="spec", k=k, concurrency=4, params=params)
    assert _outputs(spec) == _outputs(base)
    assert [len(o) for o in _outputs(spec)] == [r.max_new_tokens for r in requests]
    assert any(n < k for n in spec.accepted), "no rejection: rollback was not exercised"
    if draft_kind == "noised":
        assert any(n > 0 for n in spec.accepted), "no acceptance: the draft is useless"
        # fewer target forwards than output tokens is the point of speculation
        assert spec.target_forwards < base.target_forwards


def test_identical_draft_accepts_everything(target, requests):
    draft = noised_copy(target, 0.0)
    for params in (GREEDY, SamplingParams(temperature=0.8, top_p=0.9)):
        spec = generate(
            target, requests, draft=draft, mode="spec", k=3, concurrency=4, params=params
        )
        assert spec.accepted and all(n == 3 for n in spec.accepted)


def test_concurrency_does_not_change_greedy_output(target, requests):
    one = generate(target, requests, mode="baseline", concurrency=1, params=GREEDY)
    eight = generate(target, requests, mode="baseline", concurrency=8, params=GREEDY)
    assert _outputs(one) == _outputs(eight)


def test_sampled_runs_are_seed_deterministic(target, requests):
    draft = build_draft("noised", target, 0.2)
    params = SamplingParams(temperature=0.9, top_p=0.95, repetition_penalty=1.1)
    a = generate(
        target, requests, draft=draft, mode="spec", k=3, concurrency=4, params=params, seed=5
    )
    b = generate(
        target, requests, draft=draft, mode="spec", k=3, concurrency=4, params=params, seed=5
    )
    assert _outputs(a) == _outputs(b) and a.accepted == b.accepted


# --------------------------------------------------------------------------- exact sampling

V = 8
P_ROWS = torch.tensor(
    [
        [0.30, 0.20, 0.15, 0.10, 0.10, 0.07, 0.05, 0.03],
        [0.05, 0.05, 0.10, 0.30, 0.20, 0.10, 0.15, 0.05],
        [0.10, 0.10, 0.10, 0.10, 0.20, 0.20, 0.10, 0.10],
        [0.02, 0.08, 0.10, 0.10, 0.10, 0.10, 0.20, 0.30],
    ],
    dtype=torch.float64,
)
Q_ROWS = torch.tensor(
    [
        [0.10, 0.10, 0.30, 0.05, 0.25, 0.05, 0.05, 0.10],
        [0.20, 0.10, 0.10, 0.10, 0.10, 0.20, 0.10, 0.10],
        [0.05, 0.30, 0.05, 0.10, 0.10, 0.10, 0.20, 0.10],
    ],
    dtype=torch.float64,
)
K = 3
N_TRIALS = 200_000


def _wrong_accept(p, q, drafts, generator):
    """A broken sampler: on rejection it draws from p instead of the residual max(0, p - q)."""
    b, k = drafts.shape
    p_d = p[:, :k].gather(-1, drafts[..., None]).squeeze(-1)
    q_d = q.gather(-1, drafts[..., None]).squeeze(-1)
    u = torch.rand((b, k), generator=generator, dtype=p.dtype)
    accepted = (u * q_d <= p_d).long().cumprod(-1).sum(-1)
    return accepted, sample(p[torch.arange(b), accepted], generator)


def _run_steps(accept_fn, seed: int = 0):
    """N_TRIALS independent speculative steps with context-free p and q rows.

    Because p does not depend on the prefix, the i-th emitted token of a step, given that the
    step got that far, must be distributed as p_i, whatever q is.
    """
    gen = torch.Generator().manual_seed(seed)
    p = P_ROWS.expand(N_TRIALS, K + 1, V)
    q = Q_ROWS.expand(N_TRIALS, K, V)
    drafts = torch.stack([sample(q[:, i], gen) for i in range(K)], dim=1)
    accepted, nxt = accept_fn(p, q, drafts, gen)
    emitted = torch.cat((drafts, torch.full_like(drafts[:, :1], -1)), dim=1)
    emitted[torch.arange(N_TRIALS), accepted] = nxt
    return drafts, accepted, emitted  # emitted[:, i] is valid where accepted >= i


def _chi2(tokens, probs) -> float:
    counts = torch.bincount(tokens, minlength=V).double()
    expected = probs * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


@pytest.fixture(scope="module")
def exact_run():
    return _run_steps(speculative_accept)


@pytest.mark.parametrize("position", range(K + 1))
def test_speculative_sampling_reproduces_target(exact_run, position):
    _, accepted, emitted = exact_run
    reached = accepted >= position
    tokens = emitted[reached, position]
    assert tokens.numel() > 5_000
    assert _chi2(tokens, P_ROWS[position]) < CHI2_CRIT_DF7_ALPHA_1E3


def test_acceptance_rate_matches_overlap(exact_run):
    _, accepted, _ = exact_run
    beta = torch.minimum(P_ROWS[0], Q_ROWS[0]).sum().item()  # 1 - total variation distance
    observed = (accepted >= 1).double().mean().item()
    sigma = (beta * (1 - beta) / N_TRIALS) ** 0.5
    assert abs(observed - beta) < 5 * sigma


def test_chi_square_detects_a_sampler_that_skips_the_residual():
    _, accepted, emitted = _run_steps(_wrong_accept)
    assert _chi2(emitted[:, 0], P_ROWS[0]) > CHI2_CRIT_DF7_ALPHA_1E3


def test_greedy_accept_picks_correction_or_bonus():
    target_tokens = torch.tensor([[1, 2, 3], [1, 9, 3], [7, 2, 3]])
    drafts = torch.tensor([[1, 2], [1, 2], [1, 2]])
    accepted, nxt = greedy_accept(target_tokens, drafts)
    assert accepted.tolist() == [2, 1, 0]
    assert nxt.tolist() == [3, 9, 7]


def test_warp_top_p_and_repetition_penalty():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]], dtype=torch.float64))
    probs = warp(logits, SamplingParams(top_p=0.7))
    assert torch.allclose(probs, torch.tensor([[0.625, 0.375, 0.0, 0.0]], dtype=torch.float64))
    presence = torch.tensor([[True, False, False, False]])
    penalized = warp(
        torch.tensor([[2.0, 1.0, -1.0, 0.0]]),
        SamplingParams(greedy=True, repetition_penalty=4.0),
        presence,
    )
    assert penalized.argmax().item() == 1  # 2.0 / 4 < 1.0
    with pytest.raises(ValueError):
        SamplingParams(temperature=0)


# --------------------------------------------------------------------------- KV cache


def test_rollback_then_forward_matches_fresh_prefill(target):
    cfg = target.config
    gen = torch.Generator().manual_seed(0)
    prompts = [torch.randint(0, cfg.vocab_size, (n,), generator=gen) for n in (9, 5)]
    cache = KVCache(cfg, 2, "cpu")
    for slot, prompt in enumerate(prompts):
        target(prompt[None], cache, [slot])
    # A verify-like forward of 5 tokens on both slots, then keep only 2 and 0 of them.
    proposed = torch.randint(0, cfg.vocab_size, (2, 5), generator=gen)
    target(proposed, cache)
    assert cache.lengths == [14, 10]
    kept = [2, 0]
    for slot, n in enumerate(kept):
        cache.set_length(slot, len(prompts[slot]) + n)
    assert cache.lengths == [len(prompts[0]) + 2, len(prompts[1])]
    nxt = torch.randint(0, cfg.vocab_size, (2, 1), generator=gen)
    logits = target(nxt, cache)[:, -1]
    for slot, n in enumerate(kept):
        seq = torch.cat((prompts[slot], proposed[slot, :n], nxt[slot]))
        fresh = KVCache(cfg, 1, "cpu")
        ref = target(seq[None], fresh)[:, -1]
        torch.testing.assert_close(logits[slot : slot + 1], ref, rtol=1e-9, atol=1e-9)


def test_spec_step_keeps_cache_lengths_at_accepted_lengths(target):
    draft = build_draft("noised", target, 0.3)
    gen = Generator(target, draft, mode="spec", k=4, concurrency=3, params=GREEDY)
    assert gen.dcache is not None  # spec mode keeps the draft's cache
    reqs = [Request(i, tuple(range(1 + i, 8 + 2 * i)), 30) for i in range(3)]
    with torch.inference_mode():
        states = [gen._admit(slot, req) for slot, req in enumerate(reqs)]
        saw_rejection = False
        for _ in range(5):
            before = [len(s.context) for s in states]
            gen._spec_step([0, 1, 2], states)
            for slot, state in enumerate(states):
                assert gen.tcache.lengths[slot] == len(state.context) - 1
                assert gen.dcache.lengths[slot] == len(state.context) - 2
            steps = gen._stats.accepted[-3:]
            assert [len(s.context) - b for s, b in zip(states, before, strict=True)] == [
                n + 1 for n in steps
            ]
            saw_rejection |= any(n < 4 for n in steps)
    assert saw_rejection


@pytest.mark.parametrize("mode", ["baseline", "spec"])
def test_loop_marks_tokens_first_tokens_and_output_lengths(target, requests, mode, monkeypatch):
    """The token facts the analysis reads from a trace, recorded through the annotation API:
    tokens marks sum to the output tokens, and the last one precedes the last request end
    (which closes the analysis window)."""
    events: list[tuple] = []
    monkeypatch.setattr(annotate, "mark_tokens", lambda n: events.append(("tokens", n)))
    monkeypatch.setattr(annotate, "mark_first_token", lambda rid: events.append(("first", rid)))
    real_end = annotate.end_request

    def end(handle, output_tokens=None):
        events.append(("end", handle.request_id, output_tokens))
        real_end(handle, output_tokens=output_tokens)

    monkeypatch.setattr(annotate, "end_request", end)
    draft = build_draft("noised", target, 0.2) if mode == "spec" else None
    result = generate(
        target, requests[:5], draft=draft, mode=mode, k=3, concurrency=2, params=GREEDY
    )
    outputs = {r.request_id: len(r.output) for r in result.results}
    assert sum(e[1] for e in events if e[0] == "tokens") == sum(outputs.values())
    assert sorted(e[1] for e in events if e[0] == "first") == sorted(outputs)
    assert {e[1]: e[2] for e in events if e[0] == "end"} == outputs
    last_tokens = max(i for i, e in enumerate(events) if e[0] == "tokens")
    last_end = max(i for i, e in enumerate(events) if e[0] == "end")
    assert last_tokens < last_end


# --------------------------------------------------------------------------- models, workloads


def test_param_count_and_bytes(target):
    assert param_count(target.config) == sum(p.numel() for p in target.parameters())
    draft_cfg = smaller_config(target.config)
    assert param_count(draft_cfg) < param_count(target.config) / 4
    one = bytes_per_forward(target.config, 10)
    assert bytes_per_forward(target.config, 100) > one
    assert bytes_per_forward(target.config, [10, 10]) > one
    e = target.config.element_size
    weights = (param_count(target.config) - target.config.vocab_size * target.config.d_model) * e
    assert one > weights


def test_1b_preset_is_about_a_billion_parameters():
    n = param_count(preset("1b"))
    assert 0.9e9 < n < 1.5e9


def test_model_init_is_seeded():
    a = build_model(preset("tiny"))
    b = build_model(preset("tiny"))
    c = build_model(preset("tiny", seed=1))
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)


def test_workloads_are_fixed_per_seed():
    a = make_requests("mixed", 12, seed=1, vocab_size=128, max_seq=320)
    assert a == make_requests("mixed", 12, seed=1, vocab_size=128, max_seq=320)
    assert a != make_requests("mixed", 12, seed=2, vocab_size=128, max_seq=320)
    chat = make_requests("chat", 20, seed=0, vocab_size=128, max_seq=320)
    rag = make_requests("rag", 20, seed=0, vocab_size=128, max_seq=320)
    mean = lambda rs, f: sum(f(r) for r in rs) / len(rs)  # noqa: E731
    assert mean(chat, lambda r: len(r.prompt)) < mean(rag, lambda r: len(r.prompt))
    assert mean(chat, lambda r: r.max_new_tokens) > mean(rag, lambda r: r.max_new_tokens)
    capped = make_requests("chat", 5, seed=0, vocab_size=128, max_seq=320, max_new_tokens=7)
    assert all(r.max_new_tokens <= 7 for r in capped)
    assert set(PROFILES) == {"chat", "rag", "mixed"}


def test_acceptance_statistics():
    stats = acceptance([0, 2, 4, 4], k=4)
    assert stats["mean_accepted"] == 2.5
    assert stats["per_position"] == [0.75, 0.75, 0.5, 0.5]
    assert stats["histogram"] == [1, 0, 1, 0, 2]


def test_summary_counts_requests(target, requests):
    result = generate(target, requests[:3], mode="baseline", concurrency=2, params=GREEDY)
    s = summarize(result)
    assert s["requests"] == 3
    assert s["output_tokens"] == sum(r.max_new_tokens for r in requests[:3])
    assert s["ttft_ms"]["mean"] > 0 and s["tokens_per_s"] > 0


def test_runner_json(capsys):
    argv = [
        "--mode",
        "spec",
        "--k",
        "3",
        "--requests",
        "3",
        "--max-new-tokens",
        "8",
        "--concurrency",
        "2",
        "--profile",
        "mixed",
        "--json",
        "--warmup",
        "0",
    ]
    assert runner.main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["mode"] == "spec" and summary["requests"] == 3
    assert summary["acceptance"]["k"] == 3
    assert len(summary["acceptance"]["per_position"]) == 3
    for key in ("tokens_per_s", "ttft_ms", "tpot_ms", "target_bytes"):
        assert key in summary


def test_runner_text(capsys):
    assert runner.main(["--requests", "2", "--max-new-tokens", "4", "--greedy"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "TTFT" in out and "TPOT" in out


def test_patch_module_on_torch_module(target):
    cfg = target.config
    cache = KVCache(cfg, 1, "cpu")
    tokens = torch.tensor([[1, 2, 3]])
    with annotate.patch_module(target, {"forward": "verify"}):
        assert "forward" in vars(target)
        patched = target(tokens, cache)
    assert "forward" not in vars(target)
    cache.set_length(0, 0)
    torch.testing.assert_close(target(tokens, cache), patched)
