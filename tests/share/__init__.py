"""Share: signed bundles, SSHSIG, quarantine and hostile input."""
