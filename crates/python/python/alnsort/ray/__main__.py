"""``python -m alnsort.ray``: the command line (:func:`alnsort.ray.main`)."""

import sys

from . import main

sys.exit(main())
