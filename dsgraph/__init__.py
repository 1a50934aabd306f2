"""dsgraph: distributed GNN training on partitioned graphs (DistDGL sampling, INT2 activation compression, SAR, DS-MPNN)."""
