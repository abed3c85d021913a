"""``python -m lakesync.cli``."""

import sys

from lakesync.cli import main

sys.exit(main())
