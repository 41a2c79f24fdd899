"""`python -m jobqueue.cli …` is `jobqueue …`."""

import sys

from jobqueue.cli.main import main

sys.exit(main())
