"""``python -m specnsys`` runs the command-line interface."""

import sys

from specnsys.cli.main import main

sys.exit(main())
