import sys

from trt_backend.cli import main

sys.exit(main())
