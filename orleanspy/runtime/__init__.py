"""The runtime: activations, scheduling, the silo, the gateway and the client."""
