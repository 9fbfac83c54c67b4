"""``python -m call4agents``: the same as the ``call4agents`` command."""

from call4agents.facade.cli import main

raise SystemExit(main())
