"""A job process for tests/test_preload.py: says what it sees of itself as JSON, then ends as
its argument says (``ok``, ``raise``, ``exit3``, ``sleep``)."""
import atexit
import json
import os
import random
import sys
import time

print(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
                  "cwd": os.getcwd(), "argv": sys.argv, "marker": os.environ.get("PROBE_MARKER"),
                  "random": random.random(), "path0": sys.path[0], "name": __name__,
                  "torch_loaded": "torch" in sys.modules}), flush=True)
atexit.register(lambda: print("atexit ran", flush=True))
mode = sys.argv[1]
if mode == "raise":
    raise RuntimeError("probe failed")
if mode == "exit3":
    sys.exit(3)
if mode == "sleep":
    time.sleep(120)
