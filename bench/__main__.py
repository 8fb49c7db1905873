import sys

from kraftlog.bench.report import main

sys.exit(main())
