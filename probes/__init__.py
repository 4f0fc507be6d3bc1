"""diffprobe's in-tree probes: CPU cases run against one SGLang tree's real classes.

This package runs inside a tree's isolated environment, never in the host. It is loaded by file
location from ``harness.py`` (the only entry point) and imports nothing but the standard library
and the tree's ``sglang``, so what it observes belongs to the tree and not to diffprobe.
"""
