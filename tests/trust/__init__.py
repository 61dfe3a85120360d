"""Trust: review, the trust log (records, chain, store) and `trust --apply`."""
