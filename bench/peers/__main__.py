import sys

from bench.peers.driver import main

sys.exit(main())
