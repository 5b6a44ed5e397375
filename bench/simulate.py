"""The forecast's simulated run on a production-shaped workload: draws and time of one
speculative replicate, against the first version's padded draws measured in the same run.

A production log has many short answers and a few long ones. The first version drew, for
every request, a row of acceptances as long as the *longest* output, so a few long answers
made the run cost requests x longest draws (and ``forecast`` refused past 2**26). The
simulation now draws each request about the steps it takes (``_spec_once`` in
specnsys/forecasting/simulate.py). Both are run here on the same workload, one replicate
each, and their decode steps (the run's length at one slot, the sum of every request's
steps) and context sums are printed side by side: they are two draws of the same law, so
they agree to the noise of one replicate, not digit for digit.

The workload: --requests lengths drawn from a log-normal (median 350 tokens, sigma 0.9,
seeded), cut to 1..--longest, and --long of them set to --longest; acceptance i.i.d. at
--alpha with --k drafts. With --requests 100000 --longest 32768 the padded version would
take 3.3e9 draws a replicate: pass --no-padded to time the new one alone.

Usage: python bench/simulate.py [--requests 20000] [--longest 8192] [--long 10] [--k 4]
                                [--alpha 0.75] [--no-padded]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import load_average

from specnsys.forecasting import simulate
from specnsys.testing.draws import CountingGenerator, padded_steps


def workload(requests: int, longest: int, long: int, seed: int = 0) -> np.ndarray:
    """Output lengths of a production-shaped log (module docs)."""
    rng = np.random.default_rng(seed)
    out = np.clip(rng.lognormal(np.log(350), 0.9, requests).astype(np.int64), 1, longest)
    out[: min(long, requests)] = longest
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--longest", type=int, default=8_192)
    parser.add_argument("--long", type=int, default=10)
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.75)
    parser.add_argument("--no-padded", action="store_true")
    args = parser.parse_args()
    if args.requests < 1 or args.longest < 2 or not 0 < args.alpha < 1 or args.k < 1:
        parser.error("--requests >= 1, --longest >= 2, --k >= 1, 0 < --alpha < 1")
    out = workload(args.requests, args.longest, args.long)
    needed = np.maximum(out - 1, 0)
    survival = [args.alpha**i for i in range(1, args.k + 1)]
    cumulative = np.cumsum(simulate.tokens_distribution(survival, args.k))[:-1]
    print(f"load {load_average()}; {args.requests:,} requests, mean output {out.mean():.1f}, "
          f"{args.long} of {args.longest:,} tokens; k = {args.k}, alpha {args.alpha}; "
          f"one replicate each, steps summed over requests (one slot each)")  # fmt: skip
    rng = CountingGenerator(1)
    start = time.perf_counter()
    _, steps, ctx = simulate._spec_once(needed, np.zeros(needed.size), cumulative,
                                        needed.size, rng)  # type: ignore[arg-type]  # fmt: skip
    new_s = time.perf_counter() - start
    print(f"  now:    {rng.drawn:>14,} draws {new_s:8.2f} s   steps {steps:,.0f}  "
          f"context {ctx:,.0f}")  # fmt: skip
    padded_draws = int(needed.size) * int(needed.max())
    if args.no_padded:
        print(f"  padded: {padded_draws:>14,} draws (not run: --no-padded)")
    else:
        ref = CountingGenerator(1)
        start = time.perf_counter()
        own, before = padded_steps(needed, cumulative, ref, simulate._tokens)
        ref_steps, ref_ctx = float(own.sum()), before + float(own.sum())
        ref_s = time.perf_counter() - start
        print(f"  padded: {ref.drawn:>14,} draws {ref_s:8.2f} s   steps {ref_steps:,.0f}  "
              f"context {ref_ctx:,.0f}")  # fmt: skip
        print(f"  now / padded: draws {rng.drawn / ref.drawn:.4f}x, time {new_s / ref_s:.4f}x "
              f"({ref_s / new_s:.1f}x faster); steps differ by "
              f"{(steps - ref_steps) / ref_steps:+.4%}, context by {(ctx - ref_ctx) / ref_ctx:+.4%}")
    print(f"load {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
