"""Every options class of the silo and the client, in one place for applications.

Outside the layers: library code imports each class from the module that defines it
(``orleanspy.runtime.options``, ``orleanspy.client.options``,
``orleanspy.cluster.membership.options``).
"""

from __future__ import annotations

from orleanspy.client.options import ClientOptions
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.runtime.options import SiloOptions

__all__ = ["ClientOptions", "MembershipOptions", "SiloOptions"]
