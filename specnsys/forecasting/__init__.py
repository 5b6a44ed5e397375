"""Forecast and advise: speculation's p, speedup, best k and what to cut for a workload that
was not captured, from a step cost model fitted on traces (docs/forecast.md).

* :mod:`.fitdata` / :mod:`.extract` -- what the model is fitted on, from a trace;
* :mod:`.ols` / :mod:`.model` -- the fitted terms (:class:`~.results.CostModel`);
* :mod:`.workload` / :mod:`.simulate` / :mod:`.predict` -- the traffic, its closed-loop run in
  decode steps, and the run's time by phase;
* :mod:`.cells` -- one cell per (concurrency, k) with the prediction interval
  (:class:`~.results.Forecast`); :mod:`.formula` -- the formulas alone;
* :mod:`.advice` -- the article's three next steps (:class:`~.results.Advice`).

A metrics-level package: it reads traces through the layers below and never a dataset (that
is :mod:`specnsys.runset.forecast`).
"""
