"""diffprobe host side: pins, sources, environments, execution, receipts, bundles, CLI.

Never imports SGLang; the only thing that crosses into a tree's environment is the probe
harness invocation, and the only thing that comes back is JSON (docs/probe-contract.md).
"""

__version__ = "0.1.0"
