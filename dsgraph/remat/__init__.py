"""Sampled rematerialization: the first layers of a mini-batch aggregated one group of source
rows at a time and rebuilt in backward, with unmodified ``dgl.nn`` layers.

A :class:`RematBlock` (:mod:`~dsgraph.remat.block`) stands in for the batch's first block: its
source rows are grouped by the partition that owns them (the trainer's own first), each
partition's rows cut into groups of at most ``seqagg.chunk_rows`` rows, and the model receives
a zero-stride placeholder instead of their features. With ``sampled.remat_layers`` > 1 the next
blocks are RematBlocks too: their rows are the previous layer's output, read by position,
kept INT2 for backward with ``compression``, their gradient gathered into the input's.
Layers given the replacement forward by :func:`install` (:mod:`~dsgraph.remat.install`) run
as one autograd node (:mod:`~dsgraph.remat.layer`) that calls the layer's own forward on a
:class:`~dsgraph.remat.view.GroupBlock` per group:

* :mod:`~dsgraph.remat.rows`: where a group's rows come from (stored features, learnable
  embeddings, a later layer's input);
* :mod:`~dsgraph.remat.run`: forward: each group pulled, folded into destination-sized state
  by the shared core (:mod:`dsgraph.seqagg.kernels`) and dropped, then the output runs;
* :mod:`~dsgraph.remat.store`: the aggregate (and GAT's projections) kept from forward to
  backward, INT2 with ``compression``;
* :mod:`~dsgraph.remat.backward`: the gradients, pulling and recomputing groups only where
  what the layer aggregated needs a gradient.

A heterogeneous block (:class:`~dsgraph.remat.hetero.HeteroRematBlock`) hands
``dgl.nn.HeteroGraphConv`` a RematBlock per relation out of a type with stored rows; the
relation's layer reads its destination rows from the pair it is given.

Only destination-sized tensors live across groups. Layer-0 feature or attention dropout would
draw different masks per group run and is refused.
"""
from dsgraph.remat.block import RematBlock
from dsgraph.remat.hetero import HeteroRematBlock
from dsgraph.remat.install import install
from dsgraph.remat.rows import EmbeddingRows, FeatureRows

__all__ = ["EmbeddingRows", "FeatureRows", "HeteroRematBlock", "RematBlock", "install"]
