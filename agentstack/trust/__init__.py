"""The trust stage: consent decisions, their hash-chained log and the kept bytes."""
