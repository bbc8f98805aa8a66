"""One run: the request, the engine's pipeline (plan, replay, compare, divergence), its journal and
the documents it writes."""
