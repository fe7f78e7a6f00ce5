"""Start an emulator with a bucket or container ready, and say how to reach it.

One place for what ``amcommit demo`` and ``amcommit emulator start`` both do: start
fake-gcs-server or Azurite on 127.0.0.1, create the bucket / container, and describe the
result as an :class:`EmulatorTarget` (URL prefix, store options, environment, the exact
CLI and Spark option lines). Nothing here is atomic: a failed start stops what was started.

The Azure options carry Azurite's account key. That key is the well-known development key
Microsoft publishes for the emulator (``devstoreaccount1``), not a secret; it is shown
because a client cannot reach Azurite without it.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

from amcommit.errors import ConfigError

EmulatorKind = Literal["gcs", "azurite"]
EMULATOR_KINDS: tuple[EmulatorKind, ...] = ("gcs", "azurite")


@dataclass(frozen=True)
class EmulatorTarget:
    """A running emulator with its bucket (GCS) or container (Azurite) created."""

    kind: EmulatorKind
    endpoint: str
    """What the ``endpoint`` store option takes (Azurite: with the account in the path)."""
    bucket: str
    """The bucket (GCS) or container (Azurite)."""
    url: str
    """URL of the bucket's root as amcommit spells it, ending in ``/``."""
    options: dict[str, str] = field(repr=False)
    """Store options for :func:`~amcommit.store.schemes.open_location` and ``.option(...)``."""
    env: dict[str, str] = field(repr=False)
    """Environment variables that let the CLI and SDKs find it (instead of options)."""
    description: str

    def location(self, path: str) -> str:
        """The URL of ``path`` (no leading ``/``) inside the bucket / container."""
        return self.url + path.lstrip("/")

    def cli_options(self) -> str:
        """What to add to an ``amcommit`` command (after the environment of :attr:`env`)."""
        return f"--endpoint {shlex.quote(self.endpoint)}"

    def spark_options(self) -> list[str]:
        """``.option(...)`` calls for ``df.write.format("amcommit")``."""
        return [f'.option("{k}", "{v}")' for k, v in self.options.items()]

    def instructions(self, path: str = "PATH") -> list[str]:
        """Lines telling a user how to use this emulator with amcommit: a key/value
        header, the shell lines (environment, then a command), the Spark writer."""
        from amcommit.console import fields, render

        dest = self.location(path)
        rows = [
            ("bucket" if self.kind == "gcs" else "container", self.bucket),
            ("URL", self.url),
            ("endpoint", self.endpoint),
        ]
        if self.kind == "azurite":
            rows.append(("account", "devstoreaccount1 (key: Azurite's well-known public development key)"))
        return [
            self.description,
            render(fields(rows)),
            "",
            "shell:",
            *(f"  export {k}={shlex.quote(v)}" for k, v in self.env.items()),
            # the bucket itself: it exists from the start (``jobs`` of a path nothing was
            # written to yet is an error)
            f"  amcommit jobs {shlex.quote(self.url)} {self.cli_options()}",
            "",
            "Spark:",
            '  (df.write.format("amcommit")'
            + "".join(f"\n      {o}" for o in self.spark_options())
            + f'\n      .save("{dest}"))',
        ]


def _gcs(stack: contextlib.ExitStack, bucket: str, port: int | None) -> EmulatorTarget:
    from amcommit.emulators.fakegcs import FakeGcsServer

    srv = stack.enter_context(FakeGcsServer(port=port))
    srv.create_bucket(bucket)
    return EmulatorTarget(
        kind="gcs",
        endpoint=srv.url,
        bucket=bucket,
        url=f"gs://{bucket}/",
        options={"endpoint": srv.url},
        env=srv.env(),
        description=f"fake-gcs-server at {srv.url} (bundled binary)",
    )


def _azurite(stack: contextlib.ExitStack, container: str, port: int | None) -> EmulatorTarget:
    from amcommit import loop as amcommit_loop
    from amcommit.emulators.azurite import Azurite
    from amcommit.store.azure import BlobStore

    az = stack.enter_context(Azurite(port=port))

    async def create() -> None:
        blob = BlobStore(container=container, **az.store_options())
        async with blob:
            await blob.create_container()

    amcommit_loop.run(create)
    return EmulatorTarget(
        kind="azurite",
        endpoint=az.endpoint,
        bucket=container,
        url=f"wasb://{container}@{az.account}.blob.core.windows.net/",
        options={"endpoint": az.endpoint, "account": az.account, "account_key": az.account_key},
        env={"AZURE_STORAGE_KEY": az.account_key},
        description=f"Azurite at {az.endpoint} (Blob API)",
    )


@contextlib.contextmanager
def start_target(kind: str, bucket: str = "amcommit", *, port: int | None = None) -> Iterator[EmulatorTarget]:
    """Start emulator ``kind`` (``gcs`` or ``azurite``) on 127.0.0.1 (``port``, default a
    free one), create ``bucket`` (the container on Azurite) and yield the target; stop the
    emulator on exit. A missing or failing emulator is a :class:`~amcommit.errors.ConfigError`."""
    if kind not in EMULATOR_KINDS:
        raise ConfigError(f"unknown emulator {kind!r} (choose from {', '.join(EMULATOR_KINDS)})")
    with contextlib.ExitStack() as stack:
        try:
            target = _gcs(stack, bucket, port) if kind == "gcs" else _azurite(stack, bucket, port)
        except RuntimeError as e:  # launchers: not installed, did not start, bucket refused
            raise ConfigError(f"could not start the {kind} emulator: {e}") from None
        yield target


__all__ = ["EMULATOR_KINDS", "EmulatorKind", "EmulatorTarget", "start_target"]
