"""``python -m forethought``: the same as the ``forethought`` command."""

import sys

from forethought._cli import main

sys.exit(main())
