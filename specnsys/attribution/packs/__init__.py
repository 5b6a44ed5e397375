"""Built-in rule packs: one TOML name-mapping file per inference engine (``--rules vllm`` ...).

The files are data, loaded by :func:`specnsys.attribution.rules.load_rules` like a user's own
rules file; each names, in its header, the engine files and version whose NVTX names it
follows. This package only holds them (shipped as package data, see pyproject.toml).
"""
