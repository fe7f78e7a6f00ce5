"""The ``amcommit`` command line, a package: :mod:`amcommit.cli.main` (the entry point and
the commands on plain destinations), :mod:`amcommit.cli.common` (store arguments, config,
error printing), :mod:`amcommit.cli.table` (the table commands).

``amcommit.cli:main`` (the console script) and ``python -m amcommit.cli`` keep working. Note
that ``amcommit.cli.main`` as an attribute is the function; the module is
``sys.modules["amcommit.cli.main"]`` (``from amcommit.cli.main import ...`` works as usual).
"""

from amcommit.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
