"""A DistGraph server process: ``python -m dsgraph.cluster.dgl_server`` (started by the launcher)."""
from __future__ import annotations

import argparse
import logging
import re

from dsgraph.cluster import dgl_compat

dgl_compat.apply_from_env()  # before DGL starts: this module is a process entry point

from dgl import DGLError  # noqa: E402
from dgl.distributed import DistGraphServer  # noqa: E402

from dsgraph.cluster.worker import port_in_use_message, run_process_main, set_threads  # noqa: E402
from dsgraph.errors import ConfigError  # noqa: E402

_CANNOT_BIND = re.compile(r"Cannot bind to ([\d.:a-fA-F]+?):(\d+)")


def main() -> None:
    """Serve one partition until every client has disconnected."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--server-id", type=int, required=True)
    parser.add_argument("--ip-config", required=True)
    parser.add_argument("--part-config", required=True)
    parser.add_argument("--num-servers", type=int, required=True)
    parser.add_argument("--num-clients", type=int, required=True)
    args = parser.parse_args()
    logging.getLogger("dgl-distributed-socket").setLevel(logging.ERROR)
    set_threads()
    server = DistGraphServer(args.server_id, args.ip_config, args.num_servers, args.num_clients,
                             args.part_config, disable_shared_mem=False,
                             graph_format=("csc", "coo"))
    try:
        server.start()
    except DGLError as exc:
        taken = _CANNOT_BIND.search(str(exc))
        if taken:  # DGL's message is a C++ check failure with a stack trace
            raise ConfigError(port_in_use_message(taken.group(1), int(taken.group(2)))) from None
        raise


if __name__ == "__main__":
    run_process_main(main)
