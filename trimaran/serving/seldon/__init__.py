"""Seldon Core's data plane: the Seldon protocol (`protocol`), the units of a graph (`units`: built-ins,
prepackaged servers over the local model runtimes, user classes in Seldon's Python wrapper shape), the
in-process graph executor (`graph`) and its HTTP server (`server`, ``python -m trimaran.serving.seldon``)."""
