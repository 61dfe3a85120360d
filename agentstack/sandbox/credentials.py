"""The one list of credential files and harness homes a confined process may never reach.

Standard library only, no imports from agentstack: the guard may import it as it is. Paths are
relative to the user's home directory. `run` adds each to the policy's deny list (so a manifest
grant that reaches one is refused) on top of nono's deny groups; Landlock denies them by default
(nothing grants them). Inside `run` the harness uses a private copy of its user-level state
(`agentstack.sandbox.private_state`), never the real one.
"""

from __future__ import annotations

# Credential files and directories of the harnesses and common tools (and the history and browser
# data the guard also treats as secret). A directory covers everything below it.
CREDENTIAL_PATHS: tuple[str, ...] = (
    # keys, cloud and cluster credentials
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".kube",
    ".docker",
    ".vault-token",
    ".config/op",
    ".password-store",
    ".local/share/keyrings",
    ".s3cfg",
    ".boto",
    ".config/rclone",
    ".config/doctl",
    ".config/hcloud",
    ".terraform.d/credentials.tfrc.json",
    ".oci",
    # git hosting and package registries
    ".git-credentials",
    ".config/git/credentials",
    ".netrc",
    ".config/gh",
    ".config/hub",
    ".config/glab-cli",
    ".npmrc",
    ".yarnrc.yml",
    ".pypirc",
    ".config/pip/pip.conf",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".gem/credentials",
    ".m2/settings.xml",
    ".gradle/gradle.properties",
    ".config/composer/auth.json",
    ".composer/auth.json",
    ".nuget/NuGet/NuGet.Config",
    # databases
    ".pgpass",
    ".my.cnf",
    # coding-agent harnesses' own logins
    ".claude/.credentials.json",
    ".codex/auth.json",
    ".gemini/oauth_creds.json",
    ".config/github-copilot",
    ".copilot/config.json",
    ".cursor/cli-config.json",
    ".local/share/opencode/auth.json",
    # browsers and shell history
    ".mozilla",
    ".config/google-chrome",
    ".config/chromium",
    ".bash_history",
    ".zsh_history",
    ".python_history",
    ".node_repl_history",
)

# The harnesses' real user-level configuration and state: what runs in every later session, in any
# directory (hooks, servers, instructions, the user-level guard). Inside `run` the harness gets a
# private per-project copy instead (see private_state); the real ones are never granted.
HARNESS_HOMES: tuple[str, ...] = (
    ".claude",
    ".claude.json",
    ".codex",
)

# The home-relative paths of nono's deny groups (`resolve.NONO_DENY_GROUPS`, nono-py 0.16), copied
# so that the guard can use them without importing nono; `run` reads nono's own list, and a test
# keeps this copy equal to it.
NONO_DENY_PATHS: tuple[str, ...] = (
    ".ssh",
    ".gnupg",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".gcloud",
    ".kube",
    ".docker",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".vault-token",
    ".credentials",
    ".secrets",
    ".keys",
    ".pki",
    ".terraform.d",
    ".config/op",
    ".password-store",
    ".1password",
    ".op",
    ".local/share/keyrings",
    ".config/google-chrome",
    ".config/chromium",
    ".mozilla/firefox",
    ".config/microsoft-edge",
    ".config/BraveSoftware",
    ".bash_history",
    ".zsh_history",
    ".history",
    ".python_history",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".config/fish",
    ".env",
    ".envrc",
)

# What the guard's file rules never let a file tool touch under the home directory: the sandbox's
# list and nono's groups, so the guard and the kernel close the same files.
GUARD_DENY_PATHS: tuple[str, ...] = tuple(dict.fromkeys((*CREDENTIAL_PATHS, *NONO_DENY_PATHS)))

__all__ = ["CREDENTIAL_PATHS", "GUARD_DENY_PATHS", "HARNESS_HOMES", "NONO_DENY_PATHS"]
