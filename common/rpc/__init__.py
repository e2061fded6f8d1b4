"""sparkmill's RPC over ZeroMQ: :mod:`.framing` (wire format), :mod:`.server`, :mod:`.client`."""
