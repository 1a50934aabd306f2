"""A trainer process for tests: pull every node's features of every featured node type of a
heterogeneous DistGraph through ``g.nodes[ntype].data`` and compare with the original.

Run by ``run_dgl_job`` as ``python -m tests.dist.hetero_pull_check --run-dir RUN``; reads
``RUN/original.pt`` (``{ntype: {key: tensor}}``, per-type original ids) and writes
``RUN/pull<rank>.json``: per type and key the rows pulled, how many differ, and how many of
them were remote.
"""
from dsgraph.cluster import dgl_compat

dgl_compat.apply_from_env()  # process entry point: patch before DGL starts

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from tests.dist.trainer_process import connect, run  # noqa: E402


def main(run_dir: Path) -> None:
    """Pull all rows (local and remote) of every type's tensors and count mismatches."""
    import dgl
    import torch.distributed as dist


    rank, g = connect()
    pb = g.get_partition_book()
    original = torch.load(run_dir / "original.pt")
    result: dict = {"partid": int(pb.partid), "ntypes": list(g.ntypes),
                    "machine_id": int(dgl.distributed.rpc.get_machine_id()), "types": {}}
    for ntype, tensors in original.items():
        n = g.num_nodes(ntype)
        ids = torch.randperm(n)  # any order: own and remote rows mixed
        orig = g.nodes[ntype].data["orig_id"][ids]
        remote = pb.nid2partid(ids, ntype) != pb.partid
        for key, want in tensors.items():
            got = g.nodes[ntype].data[key][ids]
            bad = (got != want[orig]).reshape(n, -1).any(1)
            result["types"][f"{ntype}/{key}"] = {
                "rows": int(n), "remote_rows": int(remote.sum()), "mismatched": int(bad.sum()),
                "remote_mismatched": int((bad & remote).sum()),
                "orig_ids_complete": bool(torch.equal(torch.sort(orig).values,
                                                      torch.arange(n)))}
    (run_dir / f"pull{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dgl.distributed.exit_client()  # tell the servers; the process then leaves via os._exit


if __name__ == "__main__":
    run(main)
