"""Command-line options shared by several commands, declared once."""

from __future__ import annotations

import argparse
from pathlib import Path


def common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", metavar="DIR", help="cache root (default: $DIFFPROBE_CACHE or ~/.cache/diffprobe)")
    p.add_argument("--pins", metavar="FILE", help="pins.toml to use (default: the project's own)")


def env_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--python", metavar="EXE", help="interpreter for the probe environments (default: the running one)")


def path(value: str | None) -> Path | None:
    return Path(value) if value else None
