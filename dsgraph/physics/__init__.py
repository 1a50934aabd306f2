"""DS-MPNN: sampled radius graphs, domain decomposition and halo exchange for physics."""
