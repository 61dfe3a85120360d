"""The kernel sandbox and `run`: confinement, native sandboxes, the relay, secrets, the proxy gate."""
