"""Command-line runner: ``python -m instrument.run --mode spec --k 4 --profile chat ...``.

Builds the seeded target (and draft) model, generates the request set of a workload profile,
runs it through the annotated loop and prints throughput, TTFT/TPOT and acceptance. Run it
under ``nsys profile -t nvtx,osrt --sample=none --cpuctxsw=none`` (CPU) or ``-t cuda,nvtx``
(GPU) to get a trace for specnsys. A warm-up request runs first with annotations off, so
one-time costs (allocator, kernel loading) stay out of both the numbers and the traced
window. ``--torch-profile FILE`` records the measured run with ``torch.profiler`` too and
writes its Chrome trace (``.json``, or ``.json.gz``), which specnsys reads like an nsys
export: under ``specnsys profile`` one run gives both traces (the annotations are NVTX ranges
and ``record_function`` scopes at once).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator
from typing import Any

import torch

from instrument.draft import DRAFT_KINDS, build_draft
from instrument.loop import MODES, Generator, Request, RunResult
from instrument.model import PRESETS, Transformer, build_model, param_count, preset
from instrument.sampling import SamplingParams
from instrument.stats import summarize
from instrument.workloads import PROFILES, make_requests
from specnsys import annotate


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m instrument.run", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--mode", choices=MODES, default="baseline")
    ap.add_argument("--k", type=int, default=4, help="drafts per speculative step")
    ap.add_argument("--profile", choices=sorted(PROFILES), default="chat")
    ap.add_argument("--concurrency", type=int, default=4, help="sequences decoded together")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    ap.add_argument("--dtype", default=None, help="override the preset dtype (e.g. float64)")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=None, help="cap on output lengths")
    ap.add_argument("--seed", type=int, default=0, help="request set and sampling seed")
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--repetition-penalty", type=float, default=1.0)
    ap.add_argument("--draft", choices=DRAFT_KINDS, default="noised")
    ap.add_argument("--noise", type=float, default=0.1, help="noised draft: relative noise")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: stable timing)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed, unannotated warm-up requests")
    ap.add_argument(
        "--sample-delay-ms", type=float, default=0.0,
        help="sleep this long in every decode step's sample phase (an injected regression)",
    )
    ap.add_argument(
        "--torch-profile", metavar="FILE", default=None,
        help="record the measured run with torch.profiler (CPU, and CUDA on a GPU) and write "
        "its Chrome trace to FILE (.json, or .json.gz compressed)",
    )
    ap.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    return ap.parse_args(argv)


@contextlib.contextmanager
def _torch_profiled(path: str | None, device: torch.device) -> Iterator[None]:
    """Record the block with ``torch.profiler`` and write its Chrome trace to *path* (nothing
    without a path). Operators and ``record_function`` scopes only: no shapes, no stacks,
    which would add to the profiler's own overhead."""
    if path is None:
        yield
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities, record_shapes=False, with_stack=False) as prof:
        yield
    prof.export_chrome_trace(path)


def _warm_up(
    gen_args: dict[str, Any], target: Transformer, draft: Transformer | None, n: int
) -> None:
    if n <= 0:
        return
    requests = [Request(10**9 + i, (1, 2, 3, 4), 4) for i in range(n)]
    was_enabled = annotate.enabled()
    annotate.set_enabled(False)
    try:
        with torch.inference_mode():
            Generator(target, draft, **gen_args).run(requests)
    finally:
        annotate.set_enabled(was_enabled)


def run(args: argparse.Namespace) -> tuple[dict[str, Any], RunResult]:
    """Build models and requests from ``args``, run, and summarize."""
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda requested but torch.cuda.is_available() is False")
    overrides = {"dtype": args.dtype} if args.dtype else {}
    config = preset(args.preset, **overrides)
    target = build_model(config, device)
    draft = build_draft(args.draft, target, args.noise) if args.mode == "spec" else None
    params = SamplingParams(
        greedy=args.greedy,
        temperature=args.temperature,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
    )
    k = args.k if args.mode == "spec" else 0
    requests = make_requests(
        args.profile,
        args.requests,
        args.seed,
        config.vocab_size,
        config.max_seq,
        args.max_new_tokens,
        reserve=k + 1,
    )
    gen_args = dict(mode=args.mode, k=max(k, 1), concurrency=args.concurrency, params=params)
    _warm_up(gen_args, target, draft, args.warmup)
    with _torch_profiled(args.torch_profile, device), torch.inference_mode():
        result = Generator(
            target, draft, seed=args.seed, sample_delay_s=args.sample_delay_ms / 1e3, **gen_args
        ).run(requests)
    summary = summarize(result)
    summary.update(
        profile=args.profile,
        preset=args.preset,
        device=str(device),
        dtype=config.dtype,
        target_params=param_count(config),
        draft=None if draft is None else args.draft,
        draft_params=None if draft is None else param_count(draft.config),
        noise=args.noise if draft is not None and args.draft == "noised" else None,
        greedy=args.greedy,
        seed=args.seed,
        annotations=annotate.enabled(),
        torch_profile=args.torch_profile,
    )
    return summary, result


def format_text(s: dict[str, Any]) -> str:
    """Human-readable summary of ``summarize`` output."""

    def dist(d: dict[str, float]) -> str:
        return f"mean {d['mean']:.2f}  p50 {d['p50']:.2f}  p90 {d['p90']:.2f}"

    lines = [
        f"mode {s['mode']}  profile {s['profile']}  preset {s['preset']} ({s['target_params']:,}"
        f" params, {s['dtype']})  device {s['device']}  concurrency {s['concurrency']}",
        f"requests {s['requests']}  prompt tokens {s['prompt_tokens']}  output tokens"
        f" {s['output_tokens']}  wall {s['wall_s']:.3f} s",
        f"throughput  {s['tokens_per_s']:.1f} tokens/s",
        f"TTFT ms     {dist(s['ttft_ms'])}",
        f"TPOT ms     {dist(s['tpot_ms'])}",
        f"target forwards {s['target_forwards']}  draft forwards {s['draft_forwards']}",
    ]
    acc = s["acceptance"]
    if acc.get("steps"):
        per_pos = " ".join(f"{a:.2f}" for a in acc["per_position"])
        lines += [
            f"draft {s['draft']} ({s['draft_params']:,} params)  k {acc['k']}  steps {acc['steps']}",
            f"acceptance  mean accepted/step {acc['mean_accepted']:.2f}  tokens/step"
            f" {acc['tokens_per_step']:.2f}",
            f"per-position acceptance  {per_pos}",
        ]
    return "\n".join(lines)


def _json_ready(value: Any) -> Any:
    """NaN (an empty distribution) becomes null: strict JSON has no NaN."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_ready(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    summary, _ = run(args)
    if args.json:
        json.dump(_json_ready(summary), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print(format_text(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
