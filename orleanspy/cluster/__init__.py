"""The cluster: membership of silos, the grain directory, placement and the silo transport."""
