"""The share stage: signed bundles between people, received into quarantine."""
