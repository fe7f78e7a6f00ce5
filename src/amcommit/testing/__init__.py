"""Test and demo helpers shipped with amcommit: emulator launchers (Azurite,
fake-gcs-server) and the project's own in-memory test servers (ADLS Gen2 dfs, GCS double).
They bind to 127.0.0.1 only."""
