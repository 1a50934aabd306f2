"""A trainer process for tests: pull every node's feature row through DistGraph and compare.

Run by ``run_dgl_job`` as ``python -m tests.dist.pull_check --run-dir RUN``; writes
``RUN/pull<rank>.json`` with the number of rows whose pulled features differ from the original.
"""
from dsgraph.cluster import dgl_compat

dgl_compat.apply_from_env()  # process entry point: patch before DGL starts

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402


def main(run_dir: Path) -> None:
    """Pull all rows (local and remote) and count mismatches against the original features."""
    import dgl
    import torch.distributed as dist

    from dsgraph.cluster.worker import init_process_group

    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    rank, _ = init_process_group(120)
    g = dgl.distributed.DistGraph(os.environ["DSGRAPH_DGL_GRAPH"])
    pb = g.get_partition_book()
    original = torch.load(run_dir / "original_feat.pt")
    ids = torch.arange(g.num_nodes())
    feat = g.ndata["feat"][ids]
    orig = g.ndata["orig_id"][ids]
    bad = (feat != original[orig]).any(1)
    from dsgraph.distgraph.features import CachedFeatures
    perm = ids[torch.randperm(ids.numel())]  # any order, local/halo/remote rows mixed
    remote = pb.nid2partid(ids) != pb.partid
    halo_only = CachedFeatures(g, "feat")
    cached = halo_only[perm]
    # A budget for a third of the remote rows beyond the halo: those of highest out-degree.
    beyond = remote.clone()
    beyond[halo_only.cache_ids] = False
    third = int(beyond.sum()) // 3
    budgeted = CachedFeatures(g, "feat", budget_mb=third * halo_only.row_bytes / 2**20)
    in_budget = torch.zeros_like(remote)
    in_budget[budgeted.cache_ids] = True
    chosen, passed = in_budget & beyond, beyond & ~in_budget
    degree = g.out_degrees(ids)
    everything = CachedFeatures(g, "feat", budget_mb=1024.0)
    # The same budget with the partition's rows copied into one table; and reads by local id.
    tabled = CachedFeatures(g, "feat", budget_mb=third * halo_only.row_bytes / 2**20,
                            copy_own=True)
    lg = g.local_partition
    lids = torch.randperm(lg.num_nodes())
    by_lid = tabled.by_local_id(lg.ndata[dgl.NID][lids], lids)
    (run_dir / f"pull{rank}.json").write_text(json.dumps({
        "rows": int(ids.numel()), "mismatched": int(bad.sum()),
        "remote_rows": int(remote.sum()), "remote_mismatched": int((bad & remote).sum()),
        "partid": int(pb.partid), "machine_id": int(dgl.distributed.rpc.get_machine_id()),
        "cached_mismatched": int((cached != original[orig[perm]]).any(1).sum()),
        "halo_cached": halo_only.cached_rows, "halo_hits": halo_only.cache_hits,
        "beyond_halo": int(beyond.sum()), "budget_rows": third, "chosen": int(chosen.sum()),
        "chosen_min_degree": int(degree[chosen].min()) if chosen.any() else None,
        "passed_max_degree": int(degree[passed].max()) if passed.any() else None,
        "budgeted_mismatched": int((budgeted[perm] != original[orig[perm]]).any(1).sum()),
        "budgeted_misses": budgeted.remote_rows,
        "everything_cached": everything.cached_rows,
        "everything_mismatched": int((everything[perm] != original[orig[perm]]).any(1).sum()),
        "everything_misses": everything.remote_rows,
        "table_mismatched": int((tabled[perm] != original[orig[perm]]).any(1).sum()),
        "table_misses": tabled.remote_rows, "local_id_rows": int(lids.numel()),
        "local_id_mismatched": int((by_lid != original[orig[lg.ndata[dgl.NID][lids]]])
                                   .any(1).sum())}))
    dist.barrier()
    dgl.distributed.exit_client()  # tell the servers; the process then leaves via os._exit


if __name__ == "__main__":
    from dsgraph.cluster.worker import run_process_main
    parser = argparse.ArgumentParser()
    parser.add_argument("--run-dir", type=Path, required=True)
    run_process_main(main, parser.parse_args().run_dir)
