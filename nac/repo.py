"""Where the repository is: the one place that finds it (the checkout holding this ``nac`` package),
and the folders read from it. A leaf module (imports nothing of ``nac``), so that a stage reading
it adds one small file to its dependencies."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # this file is <ROOT>/nac/repo.py
CONF_DIR = ROOT / "conf"
LOCK = ROOT / "requirements.lock"
