"""amcommit: an asyncio job-commit engine (Hadoop manifest committer protocol) for Azure
Data Lake / Blob, Google Cloud Storage and local files."""

__version__ = "0.1.0"
