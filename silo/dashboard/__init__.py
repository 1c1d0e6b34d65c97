"""The silo's operations endpoints: health, readiness, Prometheus metrics, JSON figures."""

from silo.dashboard.app import OpsServer, install_ops_server, ops_server_of

__all__ = ["OpsServer", "install_ops_server", "ops_server_of"]
