"""The streamed partitioning pipeline, for graphs read in chunks that never fit in memory
(:mod:`.pipeline`): structure-only assignment within a memory budget (:mod:`.assign`, over an
out-of-core CSR (:mod:`.csr_file`), coarsened and refined (:mod:`.coarsen`, :mod:`.refine`)),
then a parallel, resumable dispatch into the same DGL partition files the in-memory writers
make (:mod:`.dispatch`, its steps and runner, halos in DGL's order: :mod:`.halo`)."""
