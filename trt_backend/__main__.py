from trt_backend.cli import script_main

script_main()
