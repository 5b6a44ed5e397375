"""The folder ``specnsys profile --annotate`` puts first on the profiled program's PYTHONPATH.

It holds only ``sitecustomize.py``, which Python's :mod:`site` imports at start-up in every
interpreter that inherits the environment (``python script.py``, ``python -m mod``, child
Python processes). This ``__init__`` exists so that the folder is installed with the package.
"""
