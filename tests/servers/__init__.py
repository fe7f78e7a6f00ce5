"""The project's own in-memory test servers (ADLS Gen2 dfs endpoint, GCS double): used by
the tests only, never installed. They bind to 127.0.0.1 only."""
