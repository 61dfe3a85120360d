"""The guard: fail closed, every protocol, input parsing, protection, tool tables, speed."""
