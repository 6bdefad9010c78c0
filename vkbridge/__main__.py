"""`python -m vkbridge`: the same entry point as the `vkbridge` script."""

from vkbridge.cli import main

raise SystemExit(main())
