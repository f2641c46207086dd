"""``python -m docstore.cli``."""

import sys

from . import main

sys.exit(main())
