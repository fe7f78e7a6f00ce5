"""Local storage emulators for demos, tests and benchmarks: Azurite (Azure Blob) and
fake-gcs-server (GCS), started as child processes bound to 127.0.0.1 only.

``amcommit emulator start gcs|azurite`` runs one from the command line; in Python::

    from amcommit.emulators import FakeGcsServer
    with FakeGcsServer() as srv:
        srv.create_bucket("b")
        ...

:func:`start_target` starts one with a bucket or container and returns what a client
needs (URL, store options); the demo and the ``emulator`` command use it.
"""

from amcommit.emulators.azurite import Azurite, AzuriteError, find_azurite
from amcommit.emulators.fakegcs import FakeGcsServer, find_binary
from amcommit.emulators.procs import free_port, stop_process

__all__ = [
    "Azurite",
    "AzuriteError",
    "FakeGcsServer",
    "find_azurite",
    "find_binary",
    "free_port",
    "stop_process",
]
