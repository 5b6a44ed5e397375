"""The real speculative-decoding workload that specnsys traces are made from.

A compact PyTorch decoder (``model``), draft models (``draft``), token selection
(``sampling``), the annotated generation loop (``loop``), request sets (``workloads``) and a
command-line runner (``python -m instrument.run``). Runs on CPU and, unchanged, on CUDA.
"""
