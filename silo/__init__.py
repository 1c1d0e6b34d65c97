"""The silo host: the ``orleanspy`` console script, TOML configuration and process startup.

``orleanspy`` (the framework) never imports this package; it is the outermost layer that turns
a command line, a config file and environment variables into a running ``orleanspy.Silo``.
"""

from __future__ import annotations

from silo.config import SiloConfig, find_config_file, load_config
from silo.startup import configure_logging, run_silo

__all__ = ["SiloConfig", "configure_logging", "find_config_file", "load_config", "run_silo"]
