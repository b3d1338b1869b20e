"""Helpers the lab's own tests share: running the host CLI and reading what a run left."""
