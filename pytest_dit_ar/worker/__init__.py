"""The process seam: the protocol, the server that runs candidate code, and the client that times it."""
