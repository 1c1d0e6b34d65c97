"""The runtime: activations, turns and scheduling, the silo core, the dispatcher and the gateway."""
