"""The cluster client: connects to silo gateways and calls grains from outside a silo."""

from orleanspy.client.client import ClusterClient
from orleanspy.client.options import ClientOptions

__all__ = ["ClientOptions", "ClusterClient"]
