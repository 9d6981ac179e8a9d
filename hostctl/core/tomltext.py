"""TOML text to a dict, with every way that can fail as one ConfigError line (the config file,
topologies, scenarios and sweep files all parse through here)."""

from __future__ import annotations

import tomllib
from typing import Any

from hostctl.errors import ConfigError


def parse_toml(data: str | bytes, what: str) -> dict[str, Any]:
    """``what`` names the source in the message, e.g. "config file /etc/hostctl.toml"."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} is not UTF-8 text (byte {e.start}): save it as UTF-8") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{what} is not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses once per level of nested arrays or inline tables
        raise ConfigError(f"{what} is not valid TOML here: arrays or tables nested too deeply") from None
