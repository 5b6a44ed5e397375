# A notebook session with specnsys, run from the repository root (tests/test_readme_example.py
# runs this file as it stands).
import polars as pl

import specnsys

base = "sample_traces/baseline_chat_c4.sqlite"
spec = "sample_traces/spec_chat_c4_k4.sqlite"

# open: the export as tables, for DuckDB SQL or Polars
with specnsys.open(spec) as trace:
    ranges = trace.sql(
        'SELECT text AS phase, count(*) AS n, sum("end" - start) / 1e6 AS ms '
        "FROM nvtx WHERE kind = 'push_pop' GROUP BY 1 ORDER BY ms DESC"
    ).pl()
    marks = (
        trace.table("nvtx")
        .filter(pl.col("kind") == "mark")
        .group_by("text")
        .agg(pl.len().alias("marks"), pl.col("payload_int").sum().alias("total"))
        .sort("text")
        .collect()
    )
print(ranges)
print(marks)

# analyze: every metric of one run (to_dict() is `specnsys analyze --json`)
run = specnsys.analyze(base)
print(f"{run.mode}: p = {run.p:.3f}, Amdahl ceiling {run.amdahl_ceiling:.2f}x")
print(run.data_warnings)  # what the export's data-quality checks found: () when clean

# phases: exclusive wall time per phase, a Polars frame summing to the window
breakdown = specnsys.phases(spec)
print(breakdown.frame.select("phase", "wall_ns", "share").sort("wall_ns", descending=True))

# compare: predicted against measured speedup
pair = specnsys.compare(base, spec).comparisons[0]
print(f"predicted {pair.predicted_speedup:.2f}x, measured {pair.measured_speedup:.2f}x")

# plot: a figure's data and its matplotlib drawing
fig = specnsys.figure("phases", base, spec)
print(fig.title)
fig.draw().savefig("phases.png")
