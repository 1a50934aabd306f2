"""One sequential-aggregation core for full-batch SAR and sampled rematerialization.

A *group* is a set of source rows (one remote part in SAR, the sampled sources owned by one
partition in sampled training) with the edges from them into the destination nodes
(:class:`dsgraph.seqagg.chunks.GroupGraph`). :mod:`dsgraph.seqagg.kernels` folds one group at a
time into destination-sized state (sums, max/min with the winning chunk, GAT's online softmax)
and computes each group's gradients in backward, in chunks of at most ``chunk_rows`` source rows,
so no edge-sized intermediate covers more than one chunk. Both modes present their groups to
unmodified ``dgl.nn`` layers through one graph view (:mod:`dsgraph.seqagg.view`) and run the
same layers, patched in one declared place (:mod:`dsgraph.seqagg.layers`); sampled
rematerialization itself is :mod:`dsgraph.remat`.
"""
