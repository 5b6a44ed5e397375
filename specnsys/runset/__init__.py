"""Run sets: many traces of a sweep analysed into one dataset, and the questions asked of it
(``collect``, ``check``). Sits above the public API, which it calls once per trace."""
