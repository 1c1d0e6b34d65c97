"""The cluster client: connects to silo gateways and calls grains from outside a silo."""
