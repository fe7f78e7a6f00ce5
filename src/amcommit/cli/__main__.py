"""``python -m amcommit.cli``: the ``amcommit`` command."""

import sys

from amcommit.cli.main import main

sys.exit(main())
