"""What diffprobe fetches and builds, kept on disk: sources resolved to trees, environments, and the
external tools (pip, git) that fill them. Imports only the bottom layer (errors, files, ui)."""
