"""The cluster: membership of silos, queue balancing across them."""
