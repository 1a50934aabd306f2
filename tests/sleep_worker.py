"""A worker for supervisor tests: joins the gloo group, then sleeps until killed."""
import argparse
import time

from dsgraph.cluster.worker import init_process_group

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir")
    parser.parse_args()
    init_process_group(60)
    time.sleep(120)
