"""The manifest: its model, rules, fast reader, view and cache, `add`/`edit`."""
