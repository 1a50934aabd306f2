"""The command-line programs (entry points dsgraph-partition, dsgraph-train, dsgraph-predict;
python -m partition|train|predict from a checkout)."""
from __future__ import annotations

import argparse
import os


def command_parser(prog: str, doc: str | None, config: bool = True,
                   **kwargs: object) -> argparse.ArgumentParser:
    """A command's parser (``kwargs`` to ArgumentParser): plain-text help from ``doc``,
    ``--config`` / ``--set`` when ``config``; DGL's backend notice silenced first (the command
    imports DGL later)."""
    from dsgraph import config as config_mod
    from dsgraph.cluster.chatter import quiet_env
    quiet_env(os.environ)
    parser = argparse.ArgumentParser(prog=prog, description=config_mod.plain_help(doc or ""),
                                     **kwargs)
    if config:
        config_mod.add_cli_args(parser)
    return parser
