"""Hosting: builds a silo from options (storage, reminders, cluster, streams).

``orleanspy.hosting.Silo`` is the public ``orleanspy.Silo``.
"""

from orleanspy.hosting.silo import Silo

__all__ = ["Silo"]
