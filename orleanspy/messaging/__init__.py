"""Messages, msgpack codec, framing and connections."""
