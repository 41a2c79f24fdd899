"""`python -m tests.harness.faults …` (`make faults`): the fault campaign, see campaign.py."""

import sys

from tests.harness.faults.campaign import main

sys.exit(main())
