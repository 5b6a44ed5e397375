"""``specnsys forecast SOURCE... [options] [--json]``: p, speedup, best k and what to cut for a
workload, from a step cost model fitted on traces or a dataset (docs/forecast.md)."""

from __future__ import annotations

import argparse

from specnsys.cli.common import add_rules_argument


def _numbers(text: str) -> list[int]:
    """``20,200`` -> [20, 200]: whole numbers >= 1."""
    out = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a whole number") from None
        if n < 1:
            raise argparse.ArgumentTypeError(f"{n}: needs a whole number >= 1")
        out.append(n)
    return out


def _sampling(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise argparse.ArgumentTypeError(f"{part!r}: write name=value (e.g. temperature=0)")
        out[name.strip()] = value.strip()
    return out


def _flatten(groups: list[list[int]] | None) -> list[int] | None:
    return None if groups is None else [n for g in groups for n in g]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "forecast",
        help="predict p, speedup, best k and what to cut for a workload and configurations "
        "not captured, from a cost model fitted on traces or a collect dataset",
        description="Fits a step cost model on the SOURCEs (one baseline and one speculative "
        "trace at least; better a collect dataset of a sweep), simulates the workload's runs "
        "and prints, per concurrency and k, the predicted p, ceiling, time per output token, "
        "speedup (step model and Amdahl side by side) with a prediction interval, the best k, "
        "the break-even draft cost and what to cut first; what it was fitted on, its error on "
        "runs it did not see, and every term it had to assume. Without a SOURCE: Amdahl's law "
        "on --p/--r, Leviathan's expectation on --alpha/--k/--c.",
    )
    p.add_argument("sources", nargs="*", metavar="SOURCE",
                   help="nsys .sqlite exports or a dataset written by specnsys collect")  # fmt: skip
    w = p.add_argument_group("the workload (default: the sources' own requests)")
    w.add_argument("--workload", metavar="FILE",
                   help="CSV or Parquet with input_tokens, output_tokens (and weight) per request")  # fmt: skip
    w.add_argument("--input-tokens", type=_numbers, metavar="N[,N...]",
                   help="input lengths of the requests (paired with --output-tokens)")  # fmt: skip
    w.add_argument("--output-tokens", type=_numbers, metavar="N[,N...]",
                   help="output lengths of the requests")  # fmt: skip
    w.add_argument("--requests", type=int, metavar="N",
                   help="requests in one simulated run (default: the rows; 256 drawn by weight)")  # fmt: skip
    c = p.add_argument_group("the configurations")
    c.add_argument("--concurrency", type=_numbers, action="append", metavar="N",
                   help="sequences decoded together (repeat or N,N; default: the sources')")  # fmt: skip
    c.add_argument("--k", type=_numbers, action="append", metavar="K",
                   help="drafts per step (repeat or K,K; default: the sources')")  # fmt: skip
    c.add_argument("--alpha", type=float,
                   help="acceptance rate, i.i.d. per position, instead of the measured profile")  # fmt: skip
    c.add_argument("--sampling", type=_sampling, metavar="NAME=VALUE[,...]",
                   help="the acceptance profile of the runs with these sampling labels")  # fmt: skip
    c.add_argument("--cut", action="append", default=[], metavar="PHASE=AMOUNT",
                   help="make a phase shorter: schedule=-17ms/step, sample=-66%%, kv=0 (repeat)")  # fmt: skip
    c.add_argument("--k-max", type=int, default=None, metavar="K",
                   help="largest k the best-k search tries (default 12)")  # fmt: skip
    f = p.add_argument_group("without sources: the formulas")
    f.add_argument("--p", type=float, help="bottleneck share p in [0, 1]")
    f.add_argument("--r", type=float, help="speedup of the accelerable part")
    f.add_argument("--c", type=float, help="draft/target forward cost ratio")
    add_rules_argument(p)
    p.add_argument("--seed", type=int, default=0, help="seed of the simulated acceptance (0)")
    p.add_argument("--no-held-out", action="store_true",
                   help="skip the held-out error (each run refitted without it)")  # fmt: skip
    p.add_argument("--save", metavar="FILE.json",
                   help="also keep the result (specnsys.results.load reads it back)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object, for scripts")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from specnsys import api
    from specnsys.forecasting.cells import DEFAULT_K_MAX
    from specnsys.forecasting.results import Forecast
    from specnsys.render.analyze_text import render_json
    from specnsys.render.forecast_text import render_forecast_text, render_formula_text
    from specnsys.results import to_dict
    from specnsys.runset.forecast import forecast

    save = _check_save(args.save, args.sources)
    result = forecast(
        *args.sources, workload=args.workload, input_tokens=args.input_tokens,
        output_tokens=args.output_tokens, requests=args.requests,
        concurrency=_flatten(args.concurrency), k=_flatten(args.k), alpha=args.alpha,
        cut=args.cut, k_max=args.k_max if args.k_max is not None else DEFAULT_K_MAX,
        sampling=args.sampling, p=args.p, r=args.r, c=args.c, rules=args.rules,
        seed=args.seed, hold_out=not args.no_held_out, use_cache=not args.no_cache,
    )  # fmt: skip
    text = (
        render_json(to_dict(result)) if args.json
        else render_forecast_text(result) if isinstance(result, Forecast)
        else render_formula_text(result)
    )  # fmt: skip
    if save is not None:
        _save(result, save)
    print(text)
    if isinstance(result, Forecast):
        api.warn(result)
    return 0


def _check_save(path: str | None, sources: list[str]) -> str | None:
    if path is None:
        return None
    from specnsys.cli.common import check_output

    return str(check_output(path, ("json",), sources))


def _save(result: object, path: str) -> None:
    from specnsys.errors import OutputError
    from specnsys.results import save

    try:
        save(result, path)
    except OSError as exc:
        raise OutputError(f"{path}: cannot write the result: {exc.strerror or exc}") from None
