"""The consent document: digest, view, diff, risk findings, boundaries, team policy, SARIF."""
