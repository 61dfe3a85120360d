"""The consent stage: the document a person reviews, its risk findings and diffs."""
