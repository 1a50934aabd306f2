"""A trainer process for tests: pull every node's feature row through DistGraph and compare.

Run by ``run_dgl_job`` as ``python -m tests.dist.pull_check --run-dir RUN``; writes
``RUN/pull<rank>.json`` with the number of rows whose pulled features differ from the original.
"""
from dsgraph.cluster import dgl_compat

dgl_compat.apply_from_env()  # process entry point: patch before DGL starts

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from tests.dist.trainer_process import connect, run  # noqa: E402


def main(run_dir: Path) -> None:
    """Pull all rows (local and remote) and count mismatches against the original features."""
    import dgl
    import torch.distributed as dist


    rank, g = connect()
    pb = g.get_partition_book()
    original = torch.load(run_dir / "original_feat.pt")
    ids = torch.arange(g.num_nodes())
    feat = g.ndata["feat"][ids]
    orig = g.ndata["orig_id"][ids]
    bad = (feat != original[orig]).any(1)
    from dsgraph.distgraph import cache_policy
    from dsgraph.distgraph.budget import cache_row_bytes
    from dsgraph.distgraph.features import CachedFeatures
    perm = ids[torch.randperm(ids.numel())]  # any order, local/halo/remote rows mixed
    remote = pb.nid2partid(ids) != pb.partid
    want = original[orig[perm]]
    uncached = CachedFeatures(g, "feat")
    plain = uncached[perm]
    # Ranked by degree, a budget for the halo and a third of the remote rows beyond it takes
    # the halo, then those of highest out-degree.
    halo = cache_policy.halo_ids(g)
    beyond = remote.clone()
    beyond[halo] = False
    third = int(beyond.sum()) // 3
    rows = halo.numel() + third
    budgeted = CachedFeatures(g, "feat")
    budgeted.fill(cache_policy.by_degree(g, pb, rows),
                  rows * cache_row_bytes(original.shape[1], 32), 32)
    in_budget = torch.zeros_like(remote)
    in_budget[budgeted.cache_ids] = True
    chosen, passed = in_budget & beyond, beyond & ~in_budget
    degree = g.out_degrees(ids)
    everything = CachedFeatures(g, "feat")
    everything.fill(cache_policy.remote_ids(pb), 1 << 30, 32)
    # 8-bit rows: every value within one quantization step of its row's block range
    quant = CachedFeatures(g, "feat")
    quant.fill(cache_policy.remote_ids(pb), 1 << 30, 8)
    got = quant[perm]
    span = (want.amax(1) - want.amin(1)).clamp_min(1e-6)
    steps = ((got - want).abs().amax(1) / (span / 255))[remote[perm]]
    # pre-sampled batches: the rows read most often come first
    batches = [perm[:40], perm[:10], perm[:10]]
    often = set(perm[:10][remote[perm[:10]]].tolist())
    ranked = cache_policy.by_frequency(iter(batches), pb, g, len(often))
    # a budget beyond the rows read and the halo is still filled, with the other remote rows
    filled = cache_policy.by_frequency(iter(batches), pb, g, int(remote.sum()))
    lg = g.local_partition
    lids = torch.randperm(lg.num_nodes())
    by_lid = everything.by_local_id(lg.ndata[dgl.NID][lids], lids)
    (run_dir / f"pull{rank}.json").write_text(json.dumps({
        "rows": int(ids.numel()), "mismatched": int(bad.sum()),
        "remote_rows": int(remote.sum()), "remote_mismatched": int((bad & remote).sum()),
        "partid": int(pb.partid), "machine_id": int(dgl.distributed.rpc.get_machine_id()),
        "uncached_mismatched": int((plain != want).any(1).sum()),
        "uncached_misses": uncached.remote_rows,
        "halo": int(halo.numel()), "halo_cached": int(in_budget[halo].sum()),
        "beyond_halo": int(beyond.sum()), "budget_rows": third, "chosen": int(chosen.sum()),
        "chosen_min_degree": int(degree[chosen].min()) if chosen.any() else None,
        "passed_max_degree": int(degree[passed].max()) if passed.any() else None,
        "budgeted_mismatched": int((budgeted[perm] != want).any(1).sum()),
        "budgeted_misses": budgeted.remote_rows,
        "everything_cached": everything.cached_rows,
        "everything_mismatched": int((everything[perm] != want).any(1).sum()),
        "everything_misses": everything.remote_rows,
        "quant_max_steps": float(steps.max()) if steps.numel() else 0.0,
        "quant_own_mismatched": int((got != want)[~remote[perm]].any(1).sum()),
        "quant_misses": quant.remote_rows, "quant_bytes": quant.cache_bytes,
        "exact_bytes": everything.cache_bytes,
        "quant_row_bytes": cache_row_bytes(original.shape[1], 8),
        "frequent": sorted(often), "ranked_first": sorted(ranked.tolist()),
        "filled_unique": int(torch.unique(filled).numel()),
        "local_id_rows": int(lids.numel()),
        "local_id_mismatched": int((by_lid != original[orig[lg.ndata[dgl.NID][lids]]])
                                   .any(1).sum())}))
    dist.barrier()
    dgl.distributed.exit_client()  # tell the servers; the process then leaves via os._exit


if __name__ == "__main__":
    run(main)
