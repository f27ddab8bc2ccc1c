"""``python -m forethought``: the same as the ``forethought`` command."""

import sys

from forethought._cli import main

# Guarded so that importing the module (the API reference's inspection imports every module)
# runs nothing.
if __name__ == "__main__":
    sys.exit(main())
