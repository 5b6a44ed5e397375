"""Pure renderers of computed results: text tables, JSON, plots, HTML."""
