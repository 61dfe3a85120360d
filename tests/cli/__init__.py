"""The command line: parsing, streams, the fast read commands, progress, the documented commands."""
