"""The surface: what each harness reads beside the manifest, scanned, found and watched."""
