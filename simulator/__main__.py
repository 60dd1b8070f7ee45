import sys

from simulator.cli import main

sys.exit(main())
